"""The worker's Celery consumer: Celery's own, publishing task events in batches.

Celery flushes buffered task events on the loop turn after each one is sent: a Redis
PUBLISH (and a wake-up of the consumer) for nearly every ``task-received``, ``task-started``
and ``task-succeeded``. When several steps finish and start at once, those publishes hold
up the consumer that should be picking up the next step. Here the first event buffered
schedules one flush ``EVENT_BATCH_S`` later, and everything buffered by then goes out in a
single message: Flower sees events that much later, and the worker makes a fraction of the
round trips.

Task events go out only while a monitor (Flower, ``celery events``) listens: the worker
runs with Celery's task events off (``worker_send_task_events``) and, before it hands a
received message on, turns the event dispatcher's ``task`` group on or off as Redis says
someone receives task events (core/event_listeners.py, asked at most every half second).
That is what Celery's own ``enable_events`` / ``disable_events`` control commands do, and
Flower still sends the first every few seconds.

Being the worker's consumer, it is also where the worker's configuration is final (after
``celery --config`` or ``CELERY_CONFIG_MODULE``): it refuses one the hooks do not support
(core/seams.py) before the worker connects.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery.worker.consumer import Consumer as CeleryConsumer

from planloop.core.errors import DispatchError
from planloop.core.event_listeners import EventListeners, probe
from planloop.core.seams import check_celery_app

log = logging.getLogger(__name__)

EVENT_BATCH_S = 0.05
TASK_GROUP = "task"  # the event group of task-received, -started, -succeeded ...


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Task events go out at most every ``EVENT_BATCH_S`` seconds, batched."""

    _event_flush_at = 0.0  # when the scheduled flush is due; 0: none is
    _listeners: tuple[Any, EventListeners] | None = None  # (of which dispatcher, probe)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        runtime = getattr(self.app, "runtime", None)  # a Planloop app (workers/runtime.py)
        if runtime is not None:
            check_celery_app(self.app, runtime.settings)

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's handler of received task messages, after task events follow monitors."""
        handle = super().create_task_handler(*args, **kwargs)

        def on_task_received(message: Any) -> Any:
            self._follow_listeners()
            return handle(message)

        return on_task_received

    def _follow_listeners(self) -> None:
        """The ``task`` event group on while a monitor listens, off otherwise. Left alone
        when task events are configured on for good (no groups: every group is sent)."""
        dispatcher = self.event_dispatcher
        if dispatcher is None or not dispatcher.enabled or not dispatcher.groups:
            return
        try:
            listening = self._listeners_of(dispatcher).listening()
        except (DispatchError, redis.RedisError):  # no probe: events as Celery was told
            log.warning("cannot ask whether a monitor listens to task events", exc_info=True)
            return
        if listening:
            dispatcher.groups.add(TASK_GROUP)
        else:
            dispatcher.groups.discard(TASK_GROUP)

    def _listeners_of(self, dispatcher: Any) -> EventListeners:
        """The probe on ``dispatcher``'s channel (a new dispatcher after each reconnect)."""
        if self._listeners is None or self._listeners[0] is not dispatcher:
            channel = dispatcher.producer.channel
            topic, payload = probe(channel, dispatcher.exchange.name, dispatcher.headers)
            client = channel.client
            self._listeners = (dispatcher, EventListeners(lambda: client.publish(topic, payload)))
        return self._listeners[1]

    def on_send_event_buffered(self) -> None:
        if self.hub is None:
            return
        now = time.monotonic()
        # A flush that is due takes this event too. One overdue by a whole batch period was
        # lost with the loop's timers (a reconnect): schedule another.
        if self._event_flush_at and now < self._event_flush_at + EVENT_BATCH_S:
            return
        self._event_flush_at = now + EVENT_BATCH_S
        # Called from whichever thread sent the event: the hub's call_soon is thread-safe,
        # its timer is not, so the flush is scheduled from the loop thread.
        self.hub.call_soon(self._schedule_event_flush)

    def _schedule_event_flush(self) -> None:
        self.hub.call_later(EVENT_BATCH_S, self._flush_event_batch)

    def _flush_event_batch(self) -> None:
        self._event_flush_at = 0.0
        self._flush_events()

    def shutdown(self) -> None:
        try:
            self._flush_events()  # what is still buffered, before the dispatcher closes
        except Exception:
            log.warning("could not publish the last task events", exc_info=True)
        super().shutdown()
