"""The worker's Celery consumer: Celery's own, publishing task events in batches.

Celery flushes buffered task events on the loop turn after each one is sent: a Redis
PUBLISH (and a wake-up of the consumer) for nearly every ``task-received``, ``task-started``
and ``task-succeeded``. When several steps finish and start at once, those publishes hold
up the consumer that should be picking up the next step. Here the first event buffered
schedules one flush ``EVENT_BATCH_S`` later, and everything buffered by then goes out in a
single message: Flower sees events that much later, and the worker makes a fraction of the
round trips.

Being the worker's consumer, it is also where the worker's configuration is final (after
``celery --config`` or ``CELERY_CONFIG_MODULE``): it refuses one the hooks do not support
(core/seams.py) before the worker connects.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from planloop.core.seams import check_celery_app

log = logging.getLogger(__name__)

EVENT_BATCH_S = 0.05


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Task events go out at most every ``EVENT_BATCH_S`` seconds, batched."""

    _event_flush_at = 0.0  # when the scheduled flush is due; 0: none is

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        runtime = getattr(self.app, "runtime", None)  # a Planloop app (workers/runtime.py)
        if runtime is not None:
            check_celery_app(self.app, runtime.settings)

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
