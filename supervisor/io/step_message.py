"""Step messages built from one template that Celery and kombu made, instead of by them each time.

Building a message through ``amqp.create_task_message`` and kombu's ``basic_publish`` costs
about 0.4 ms of the supervisor's event loop per step (its protocol-2 headers, the task-sent
event, kombu's envelope, base64 and two JSON encodings): a burst of a thousand sessions of
five steps spent two seconds in it alone. Of all that, only a few fields differ between two
attempts: the task id (in three places), the arguments, their masked preview and the tool's
name in ``shadow``; and in the task-sent event, the Lamport clock and the time.

So :class:`StepMessages` has Celery build one *probe* message whose varying fields hold
sentinel values, publishes it through kombu's publish-batch protocol, and keeps the JSON
text kombu would push as a template: each attempt's message is that text with its own
values (JSON-encoded) put where the sentinels were, which is the text ``json.dumps`` would
make of the same message. A Celery or kombu upgrade that puts a per-task value somewhere this
module does not fill in, or changes the envelope's encoding, raises :class:`DispatchError`
when the template is made
(tests/unit/test_step_message.py compares with ``as_task_v2``, and
tests/integration/test_dispatch.py with ``send_task`` on Redis and a real worker).
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, cast

from celery import Celery
from celery.events import Event as CeleryEvent
from celery.utils.time import utcoffset
from kombu.utils import json as kombu_json

from planloop.config.celery import STEP_TASK
from planloop.core.errors import DispatchError
from planloop.core.lua.session_writes import QUEUE
from planloop.core.receipts import HELD_TAG_PREFIX, KOMBU_UNACKED

Op = tuple[str, str, list[Any]]  # (command, key, args): an op of SessionStore.write
# kombu's JSON encoder, as send_task encodes; one instance (kombu's dumps makes one per call,
# which costs more than encoding a step's arguments).
dumps = cast(Callable[[Any], str], kombu_json.JSONEncoder().encode)
loads = cast(Callable[[str], Any], kombu_json.loads)

CONTENT_TYPE, CONTENT_ENCODING = "application/json", "utf-8"
PERSISTENT, TRANSIENT = 2, 1  # delivery modes: task messages, events
# The commands kombu's Redis transport publishes with: to a queue, to the event fanout.
PUBLISH_COMMANDS = {"lpush": "LPUSH", "publish": "PUBLISH"}
SENT_ROUTING_KEY = "task.sent"

# Sentinels of the probe message, each standing for one per-message value.
ID = "planloop-probe-task-id"  # the task id: header id and root_id, the correlation id
ARGSREPR = "planloop-probe-argsrepr"  # Flower's masked preview of the arguments
SHADOW = "planloop-probe-shadow"  # the name workers log and Flower shows
ARGS = "planloop-probe-args"  # the task's one positional argument
BODY = "planloop-probe-body"  # kombu's envelope: the base64 body
TAG = "planloop-probe-delivery-tag"  # kombu's envelope: a fresh delivery tag per message
CLOCK = "planloop-probe-clock"  # the task-sent event's Lamport clock
TIMESTAMP = "planloop-probe-timestamp"  # the task-sent event's time
UTCOFFSET = "planloop-probe-utcoffset"  # the sender's offset to UTC (DST moves it)


class Commands:
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


@dataclass(frozen=True)
class TextTemplate:
    """The JSON text of a value whose sentinel strings are slots for other JSON texts."""

    pieces: tuple[str, ...]  # one more than slots: text, slot, text, slot, ..., text
    slots: tuple[str, ...]  # the sentinel of each slot, in order

    @classmethod
    def of(cls, value: Any, sentinels: Collection[str], where: str) -> TextTemplate:
        """``value``'s JSON text (kombu's encoding), cut at each sentinel string.

        DispatchError when a sentinel is part of a longer text (a field this template
        cannot fill) or a required one is missing.
        """
        text = dumps(value)
        pattern = re.compile("|".join(re.escape(dumps(s)) for s in sentinels))
        pieces, slots, at = [], [], 0
        for found in pattern.finditer(text):
            pieces.append(text[at : found.start()])
            slots.append(cast(str, loads(found.group())))
            at = found.end()
        pieces.append(text[at:])
        rest = "".join(pieces)
        misplaced = [s for s in sentinels if s in rest]
        missing = [s for s in sentinels if s not in slots]
        if misplaced or missing:
            raise DispatchError(
                f"Celery's or kombu's {where} changed: per-message values "
                f"{misplaced or missing} are {'inside other fields' if misplaced else 'gone'} "
                "(supervisor/io/step_message.py; pin Celery and kombu or update the template)"
            )
        return cls(tuple(pieces), tuple(slots))

    def render(self, values: Mapping[str, str]) -> str:
        """The text with each slot replaced by ``values[its sentinel]`` (JSON text)."""
        out = [self.pieces[0]]
        for slot, piece in zip(self.slots, self.pieces[1:], strict=True):
            out += (values[slot], piece)
        return "".join(out)


class StepMessages:
    """The LPUSH (and task-sent PUBLISH) ops of one attempt, from templates made once.

    Args:
        celery: the supervisor's Celery app (its configuration decides the message).
        channel: a kombu Redis channel on which the step queue is declared.
        events: the app's event dispatcher, or None when task-sent events are off.
        queue: the step queue.
        reply_to: what ``send_task`` puts in ``reply_to`` (the app's thread oid).
    """

    def __init__(
        self, celery: Celery, channel: Any, events: Any, queue: str, *, reply_to: str
    ) -> None:
        self.queue = queue
        self._events = events
        # Delivery tags: unique per message, as kombu's uuid4 ones, without a uuid4 (and its
        # urandom call) per message: this process's random prefix and a counter, uuid-shaped.
        self._tag_prefix = str(uuid.uuid4())[:24]
        self._tag_numbers = itertools.count(1)
        # Messages are held from the dispatch (their unacked entry written with them) where
        # workers name the unacked hash as this channel does: kombu's default name, which a
        # worker's receipt checks too (core/receipts.py). Elsewhere the claim writes it.
        self._unacked: str | None = (
            channel.unacked_key if channel.unacked_key == KOMBU_UNACKED else None
        )
        headers, properties, body, sent = celery.amqp.create_task_message(
            ID,
            STEP_TASK,
            [ARGS],
            {},
            reply_to=reply_to,
            create_sent_event=events is not None,
            argsrepr=ARGSREPR,
            kwargsrepr="{}",
            shadow=SHADOW,
            ignore_result=None,  # as send_task leaves it: the task itself ignores results
        )
        self._body = TextTemplate.of(body, [ARGS], "task message body")
        self._key, envelope = _probe(
            channel,
            channel.prepare_message(
                dumps(body),
                0,
                CONTENT_TYPE,
                CONTENT_ENCODING,
                headers,
                {**properties, "delivery_mode": PERSISTENT},
            ),
            exchange="",
            routing_key=queue,
            expect="LPUSH",
        )
        self._message = TextTemplate.of(
            _slotted(envelope, dumps(body)), [ID, ARGSREPR, SHADOW, BODY, TAG], "task message"
        )
        delivery = envelope["properties"].get("delivery_info") or {}
        # kombu's unacked entry is [message, exchange, routing key]: what follows the message
        self._entry_tail = (
            f"{dumps(delivery.get('exchange', ''))}, {dumps(delivery.get('routing_key', queue))}"
        )
        self._event: TextTemplate | None = None
        self._event_envelope: TextTemplate | None = None
        if events is None or sent is None:
            return
        event = CeleryEvent(
            "task-sent",
            hostname=events.hostname,
            utcoffset=UTCOFFSET,
            pid=os.getpid(),
            clock=CLOCK,
            **sent,
            queue=queue,
            exchange="",
            routing_key=queue,
            timestamp=TIMESTAMP,
        )
        self._event = TextTemplate.of(
            event, [ID, ARGSREPR, CLOCK, TIMESTAMP, UTCOFFSET], "task-sent event"
        )
        self._event_key, event_envelope = _probe(
            channel,
            channel.prepare_message(
                dumps(event),
                0,
                CONTENT_TYPE,
                CONTENT_ENCODING,
                events.headers,
                {"delivery_mode": TRANSIENT},
            ),
            exchange=events.exchange.name,
            routing_key=SENT_ROUTING_KEY,
            expect="PUBLISH",
        )
        self._event_envelope = TextTemplate.of(
            _slotted(event_envelope, dumps(event)), [BODY, TAG], "task-sent event envelope"
        )

    def ops(
        self,
        task_id: str,
        args: Any,
        argsrepr: str,
        shadow: str,
        extra_headers: Mapping[str, str] | None = None,
        *,
        announce: bool = True,
    ) -> list[Op]:
        """The commands that queue one attempt with argument ``args`` (JSON-ready) and, with
        ``announce``, send its task-sent event to Flower; ``extra_headers`` are added to the
        message's headers."""
        values = {ID: dumps(task_id), ARGSREPR: dumps(argsrepr)}
        body = self._body.render({ARGS: dumps(args)})
        values[SHADOW] = dumps(shadow)
        values[BODY] = _base64(body)
        held = self._unacked is not None
        tag = self._new_tag(HELD_TAG_PREFIX if held else "")
        values[TAG] = f'"{tag}"'
        message = self._message.render(values)
        if extra_headers:  # tracing: rare enough to go through the dict
            envelope = loads(message)
            envelope["headers"].update(extra_headers)
            message = dumps(envelope)
        ops: list[Op] = [
            (QUEUE, self._key, [message, self._unacked, tag, self._entry_tail])
            if self._unacked is not None
            else ("LPUSH", self._key, [message])
        ]
        if not announce or self._event is None or self._event_envelope is None:
            return ops
        values[CLOCK] = dumps(self._events.clock.forward())
        values[TIMESTAMP] = dumps(time.time())
        values[UTCOFFSET] = dumps(utcoffset())
        event = self._event.render(values)
        envelope_values = {BODY: _base64(event), TAG: self._tag()}
        ops.append(("PUBLISH", self._event_key, [self._event_envelope.render(envelope_values)]))
        return ops

    def _tag(self) -> str:
        """A new delivery tag, as JSON text."""
        return f'"{self._new_tag()}"'

    def _new_tag(self, prefix: str = "") -> str:
        return f"{prefix}{self._tag_prefix}{next(self._tag_numbers):012x}"


def _base64(text: str) -> str:
    """``text`` base64-encoded as a JSON string (kombu's body encoding)."""
    return '"' + base64.b64encode(text.encode()).decode() + '"'


def _probe(
    channel: Any, message: dict[str, Any], *, exchange: str, routing_key: str, expect: str
) -> tuple[str, dict[str, Any]]:
    """Publish ``message`` through kombu into a collector: its key and envelope."""
    collected = Commands()
    channel.basic_publish(
        message, exchange=exchange, routing_key=routing_key, _publish_batch=collected
    )
    if len(collected.ops) != 1 or collected.ops[0][0] != expect:
        raise DispatchError(
            f"kombu published a step message as {[op[:2] for op in collected.ops]}, not one "
            f"{expect} (supervisor/io/step_message.py; pin kombu or update the template)"
        )
    _command, key, payload = collected.ops[0]
    return key, cast(dict[str, Any], loads(payload[0]))


def _slotted(envelope: dict[str, Any], body: str) -> dict[str, Any]:
    """kombu's envelope of a probe with sentinels for its body and delivery tag;
    DispatchError unless the body is base64 of ``body`` (the encoding written here)."""
    properties = dict(envelope.get("properties") or {})
    encoded = envelope.get("body")
    if (
        properties.get("body_encoding") != "base64"
        or not isinstance(encoded, str)
        or base64.b64decode(encoded).decode() != body
        or "delivery_tag" not in properties
    ):
        raise DispatchError(
            "kombu's message envelope changed (body encoding or delivery tag) "
            "(supervisor/io/step_message.py; pin kombu or update the template)"
        )
    properties["delivery_tag"] = TAG
    return {**envelope, "body": BODY, "properties": properties}
