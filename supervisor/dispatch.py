"""Turns step attempts into the Redis commands that queue them as Celery tasks.

Celery builds each message (``amqp.create_task_message``: protocol-2 headers, properties,
body, and the ``task-sent`` event that Flower shows) and kombu routes and encodes it, through
kombu's publish-batch protocol, which hands over the final Redis commands instead of running
them. The session loop runs those commands in the same fenced write that marks the steps
running: dispatching is one atomic Redis call, made only while the supervisor owns the
session, and a step is never running without its message queued, or queued without being
running. ``Celery.send_task`` would also publish every message and event on its own, check
the declarations and wrap a retry loop around each; measured, that costs the supervisor
about 0.2 ms of CPU per step more (bench/README.md). ``tests/integration/test_dispatch.py``
checks that both produce the same messages.

Flower displays task arguments as sent, so each message carries ``argsrepr`` masked by the
one masker (core/masking.py), with the sensitive fields of the local registry and of the tool
catalogue workers publish; the params of a tool neither knows are hidden whole.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any, cast

from celery import Celery
from celery.events import Event as CeleryEvent
from celery.utils.time import utcoffset
from kombu.utils import json as kombu_json

from planloop.config.celery import STEP_TASK, celery_config, step_task_name
from planloop.config.settings import Settings
from planloop.core.catalogue import SensitiveNames, catalogue_client
from planloop.core.errors import DispatchError
from planloop.core.keys import Keys
from planloop.core.masking import MASK, mask
from planloop.core.models import StepTaskArgs
from planloop.core.tools import ToolRegistry
from planloop.core.tracing import step_headers

log = logging.getLogger(__name__)

CONTENT_TYPE, CONTENT_ENCODING = "application/json", "utf-8"
PERSISTENT, TRANSIENT = 2, 1  # delivery modes: task messages, events
# The commands kombu's Redis transport publishes with: to a queue, to the event fanout.
PUBLISH_COMMANDS = {"lpush": "LPUSH", "publish": "PUBLISH"}
dumps = cast(Callable[[Any], str], kombu_json.dumps)  # kombu's JSON, as send_task encodes
# Flower's view of a task's arguments is a preview: the message (and every task event of the
# worker) carries it besides the arguments themselves, so a big value would travel thrice.
ARGSREPR_CHARS = 2_000

Op = tuple[str, str, list[Any]]  # (command, key, args): an op of SessionStore.write


def _preview(shown: str) -> str:
    """``shown`` cut to ``ARGSREPR_CHARS``, saying how long it was."""
    if len(shown) <= ARGSREPR_CHARS:
        return shown
    return f"{shown[:ARGSREPR_CHARS]}... (truncated: {len(shown)} chars in all)"


class _Commands:
    """Collects the Redis commands kombu would run to publish a message.

    kombu's publish-batch protocol (kombu >= 5.7): the Redis channel hands each final
    command to ``add`` instead of running it.
    """

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, name: str, key: str, *args: Any) -> None:
        command = PUBLISH_COMMANDS.get(name)
        if command is None:
            raise DispatchError(
                f"kombu wants to run {name!r} to publish a step message; Planloop queues "
                "with LPUSH and PUBLISH only (is the step queue declared with an expiry?)"
            )
        self.ops.append((command, key, list(args)))


class Dispatcher:
    """The supervisor's side of the Celery queue: messages for attempts, revokes."""

    def __init__(self, settings: Settings, tools: ToolRegistry) -> None:
        self.settings = settings
        self.tools = tools
        self.sensitive = SensitiveNames(
            tools,
            catalogue_client(settings.redis_url),
            Keys(settings.key_prefix),
            settings.catalogue_refresh_s,
        )
        self.celery = Celery("planloop-supervisor", set_as_current=False)
        self.celery.conf.update(celery_config(settings))
        self._channel: Any = None
        self._events: Any = None

    def commands(self, *attempts: StepTaskArgs) -> list[Op]:
        """The Redis commands that queue ``attempts`` under their deterministic task ids
        (and announce them to Flower), for the caller's fenced write."""
        channel = self._open()
        collected = _Commands()
        for args in attempts:
            self._publish(collected, channel, args)
        return collected.ops

    def _publish(self, collected: _Commands, channel: Any, args: StepTaskArgs) -> None:
        queue = self.settings.queue
        headers, properties, body, sent = self.celery.amqp.create_task_message(
            args.task_id,
            STEP_TASK,
            [args.model_dump(mode="json")],
            {},
            reply_to=self.celery.thread_oid,
            create_sent_event=self.celery.conf.task_send_sent_event,
            argsrepr=_preview(self._shown(args)),
            kwargsrepr="{}",
            shadow=step_task_name(args.tool),  # Flower and worker logs name the tool
            ignore_result=None,  # as send_task leaves it: the task itself ignores results
        )
        headers.update(step_headers(args.session_id))  # the session's trace, when traced
        message = channel.prepare_message(
            dumps(body),
            0,
            CONTENT_TYPE,
            CONTENT_ENCODING,
            headers,
            {**properties, "delivery_mode": PERSISTENT},
        )
        channel.basic_publish(message, exchange="", routing_key=queue, _publish_batch=collected)
        if sent is None:
            return
        events = self._events
        event = CeleryEvent(
            "task-sent",
            hostname=events.hostname,
            utcoffset=utcoffset(),
            pid=os.getpid(),
            clock=events.clock.forward(),
            **sent,
            queue=queue,
            exchange="",
            routing_key=queue,
        )
        message = channel.prepare_message(
            dumps(event),
            0,
            CONTENT_TYPE,
            CONTENT_ENCODING,
            events.headers,
            {"delivery_mode": TRANSIENT},
        )
        channel.basic_publish(
            message,
            exchange=events.exchange.name,
            routing_key="task.sent",
            _publish_batch=collected,
        )

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
        return json.dumps([shown], default=str)

    def _open(self) -> Any:
        """A kombu channel that knows the step queue and the event exchange (declared once:
        the queue's binding is what routes messages to it)."""
        if self._channel is None:
            connection = self.celery.connection_for_write()
            channel = connection.default_channel
            self.celery.amqp.queues[self.settings.queue](channel).declare()
            events = self.celery.events.Dispatcher(connection, enabled=True)
            events.exchange(channel).declare()
            self._channel, self._events = channel, events
        return self._channel

    def revoke(self, task_ids: Iterable[str]) -> None:
        """Ask workers to drop these attempts (a running one is fenced off anyway)."""
        ids = list(task_ids)
        if ids:
            self.celery.control.revoke(ids)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
        self.sensitive.close()
        self.celery.close()
