"""Turns step attempts into the Redis commands that queue them as Celery tasks.

Each message (protocol-2 headers, properties, body, and the ``task-sent`` event that Flower
shows) and kombu's envelope of it come from a template that Celery's
``amqp.create_task_message`` and kombu's publish-batch protocol made once
(supervisor/io/step_message.py): building them through Celery and kombu for every step cost
about 0.4 ms of the event loop each. The session loop runs those commands in the same fenced
write that marks the steps running: dispatching is one atomic Redis call, made only while
the supervisor owns the session, and a step is never running without its message queued, or
queued without being running. ``Celery.send_task`` would also publish every message and
event on its own, check the declarations and wrap a retry loop around each; measured, that
costs the supervisor about 0.2 ms of CPU per step more (bench/README.md).
``tests/integration/test_dispatch.py`` checks that both produce the same messages.

Each attempt goes to the queue in its arguments (``StepTaskArgs.queue``, which the session
loop chose with :meth:`Dispatcher.route`, core/routing.py); the templates are made per queue,
on the first attempt sent to it, since the queue is part of the message (its routing, the
task-sent event Flower reads it from).

A task-sent event goes with a message only while a monitor listens to task events
(core/event_listeners.py): without one it is a PUBLISH and a kilobyte nobody receives.

Flower displays task arguments as sent, so each message carries ``argsrepr`` masked by the
one masker (core/masking.py), with the sensitive fields of the local registry and of the tool
catalogue workers publish; the params of a tool neither knows are hidden whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery

from planloop.config.celery import celery_config, step_task_name
from planloop.config.settings import Settings
from planloop.core.catalogue import SensitiveNames, catalogue_client
from planloop.core.event_listeners import EventListeners, probe
from planloop.core.keys import Keys
from planloop.core.masking import MASK, mask
from planloop.core.metrics import count_dispatched
from planloop.core.models import StepTaskArgs
from planloop.core.redis_client import redis_address
from planloop.core.routing import LiveRoutes, route_step
from planloop.core.seams import check_celery_app
from planloop.core.tools import ToolRegistry
from planloop.core.tracing import step_headers
from planloop.planner.answer_step import ANSWER_TOOL
from planloop.planner.plan import Step
from planloop.planner.react_step import REACT_TOOL
from planloop.supervisor.io.step_message import Op, StepMessages

log = logging.getLogger(__name__)

# Flower's view of a task's arguments is a preview: the message (and every task event of the
# worker) carries it besides the arguments themselves, so a big value would travel thrice.
ARGSREPR_CHARS = 2_000


def _preview(shown: str) -> str:
    """``shown`` cut to ``ARGSREPR_CHARS``, saying how long it was."""
    if len(shown) <= ARGSREPR_CHARS:
        return shown
    return f"{shown[:ARGSREPR_CHARS]}... (truncated: {len(shown)} chars in all)"


class Dispatcher:
    """The supervisor's side of the Celery queue: messages for attempts, revokes."""

    def __init__(self, settings: Settings, tools: ToolRegistry) -> None:
        self.settings = settings
        self.tools = tools
        self.sensitive = SensitiveNames(
            tools,
            catalogue_client(redis_address(settings)),
            Keys(settings.key_prefix),
            settings.catalogue_refresh_s,
        )
        self.routes = LiveRoutes(
            catalogue_client(redis_address(settings)),
            Keys(settings.key_prefix),
            settings.queue,
            settings.route_refresh_s,
        )
        self.celery = Celery("planloop-supervisor", set_as_current=False)
        self.celery.conf.update(celery_config(settings))
        check_celery_app(self.celery, settings)  # the hooks' versions and broker (core/seams.py)
        self._messages: dict[str, StepMessages] = {}
        self._channel: Any = None
        self._events: Any = None
        self._listeners: EventListeners | None = None  # None: task-sent events are off

    def route(self, step: Step) -> str | None:
        """The queue to send ``step`` to, or None while no live worker serves its tool
        (core/routing.py); the heartbeats are read at most every ``route_refresh_s``."""
        return route_step(
            step_needs(step),
            tool=step.tool,
            step_queue=step.queue,
            tool_queues=self.settings.tool_queues,
            pools=self.routes.pools(),
            key=step.id,
        )

    def commands(self, *attempts: StepTaskArgs) -> list[Op]:
        """The Redis commands that queue ``attempts`` under their deterministic task ids
        (and announce them to Flower), each to its own queue, for the caller's fenced write."""
        ops: list[Op] = []
        announce: bool | None = None  # task-sent events: only while a monitor listens
        for args in attempts:
            queue = args.queue or self.settings.queue
            messages = self._messages.get(queue) or self._open(queue)
            if announce is None:
                announce = self._listeners is not None and self._listeners.listening()
            count_dispatched(queue)
            ops += messages.ops(
                args.task_id,
                args.wire(),
                _preview(self._shown(args)),
                step_task_name(args.tool),  # Flower and worker logs name the tool
                step_headers(args.session_id),  # the session's trace, when traced
                announce=announce,
            )
        return ops

    def _shown(self, args: StepTaskArgs) -> str:
        """The task's arguments as Flower displays them: sensitive fields masked."""
        hidden = self.sensitive.of_tool(args.tool)
        shown = {
            "session": args.session_id,
            "step": args.step_id,
            "attempt": args.attempt,
            "tool": args.tool,
            "params": mask(args.params, hidden)
            if hidden is not None
            else dict.fromkeys(args.params, MASK),
        }
        if args.requested_by:  # the person whose approval or retry caused this attempt
            shown["requested_by"] = args.requested_by
        return json.dumps([shown], default=str)

    def _open(self, queue: str) -> StepMessages:
        """The step messages' templates of ``queue``, made on a kombu channel that knows the
        queue and the event exchange (each declared once: the queue's binding is what routes
        messages to it)."""
        if self._channel is None:
            connection = self.celery.connection_for_write()
            self._channel = connection.default_channel
            events = self.celery.events.Dispatcher(connection, enabled=True)
            events.exchange(self._channel).declare()
            self._events = events
            if self.celery.conf.task_send_sent_event:
                topic, payload = probe(self._channel, events.exchange.name, events.headers)
                client = self.routes.client
                self._listeners = EventListeners(lambda: int(client.publish(topic, payload)))
        self.celery.amqp.queues[queue](self._channel).declare()
        messages = StepMessages(
            self.celery,
            self._channel,
            self._events if self.celery.conf.task_send_sent_event else None,
            queue,
            reply_to=self.celery.thread_oid,
        )
        self._messages[queue] = messages
        return messages

    def revoke(self, task_ids: Iterable[str]) -> None:
        """Ask workers to drop these attempts (a running one is fenced off anyway)."""
        ids = list(task_ids)
        if ids:
            self.celery.control.revoke(ids)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
        self.sensitive.close()
        self.routes.close()
        self.celery.close()


def step_needs(step: Step) -> list[str]:
    """The tools a worker must serve to run ``step``: its tool; an agent step's tools (the
    agent itself runs on any worker); nothing for an answer step."""
    if step.tool == REACT_TOOL:
        inner = step.params.get("tools")
        return [str(t) for t in inner] if isinstance(inner, list) else []
    if step.tool == ANSWER_TOOL:
        return []
    return [step.tool]
