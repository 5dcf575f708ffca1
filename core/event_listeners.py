"""Whether a monitor (Flower, ``celery events``) listens to task events, asked of Redis itself.

Task events (the supervisor's ``task-sent``, a worker's ``task-received``, ``-started``,
``-succeeded`` ...) are for monitors only; without one they are a PUBLISH and about 1 KB per
event that nobody receives. On kombu's Redis transport a monitor receives them by a pattern
subscription to the event exchange's topics, and Redis answers every PUBLISH with the number
of subscribers that got it. So :class:`EventListeners` publishes an empty batch of task
events (a list, which Celery's receivers iterate: nothing happens) and counts who got it, at
most once per ``every_s`` and only when asked (a process that sends nothing probes nothing).
Worker gossip subscribes to ``worker.*`` topics only, so it never counts as a monitor.

A monitor that starts listening is seen by the next question asked after ``every_s``: the
events of that moment's steps may be missing from it, as they are for any monitor started
late. A probe Redis does not answer counts as a listener (events are sent as before), and
the next is tried ``UNANSWERED_S`` later.

No kombu import: the probe's command is made by the caller's kombu channel (``probe``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis

from planloop.core.errors import DispatchError

log = logging.getLogger(__name__)

EVERY_S = 0.5  # how stale the answer may be
UNANSWERED_S = 5.0  # after a probe Redis did not answer: each try may wait a client timeout
PROBE_ROUTING_KEY = "task.multi"  # the routing key of Celery's own batches of task events


class _Collected:
    """kombu's publish-batch collector: keeps the final command instead of running it."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str, tuple[Any, ...]]] = []

    def add(self, name: str, key: str, *args: Any) -> None:
        self.commands.append((name, key, args))


def probe(channel: Any, exchange: str, headers: dict[str, Any]) -> tuple[str, str]:
    """The PUBLISH (topic, payload) of an empty task-event batch on ``channel``'s event
    exchange ``exchange``, as kombu would send it (its publish-batch protocol)."""
    message = channel.prepare_message(
        "[]", 0, "application/json", "utf-8", headers, {"delivery_mode": 1}
    )
    collected = _Collected()
    channel.basic_publish(
        message, exchange=exchange, routing_key=PROBE_ROUTING_KEY, _publish_batch=collected
    )
    if len(collected.commands) != 1 or collected.commands[0][0] != "publish":
        raise DispatchError(
            f"kombu published a task-event batch as {collected.commands}, not one PUBLISH "
            "(core/event_listeners.py; pin kombu or update the probe)"
        )
    _name, topic, args = collected.commands[0]
    return topic, str(args[0])


class EventListeners:
    """Whether anything receives task events, asked through ``publish`` (the probe's PUBLISH:
    how many received it) at most every ``every_s``."""

    def __init__(
        self,
        publish: Callable[[], int],
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self.every_s = every_s
        self._clock = clock
        self._asked_at = float("-inf")
        self._listening = True

    def listening(self) -> bool:
        now = self._clock()
        if now - self._asked_at >= self.every_s:
            self._asked_at = now
            try:
                self._listening = self._publish() > 0
            except redis.RedisError as exc:  # unanswered: counts as a listener
                log.debug("task-event listener probe failed: %s", exc)
                self._listening = True
                self._asked_at = now + UNANSWERED_S - self.every_s
        return self._listening
