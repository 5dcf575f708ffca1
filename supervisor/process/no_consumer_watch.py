"""Noticing that no worker consumes the step queues: one warning per episode, then its end.

The supervisor looks at the queues its attempts were sent to (core/routing.py picks them
from the live workers' heartbeats, but a worker may die or stall after that): attempts that
wait in them while they do not shrink mean nobody takes messages (all of its workers died,
or none listens to an explicit queue). :class:`ConsumerWatch` is the pure bookkeeping of one
session's view; :class:`ConsumerMonitor` feeds it the queues' length and what it learns about
the session's own attempts, and tells the user (a log WARNING, a progress note, a WARNING event).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from planloop.config.settings import Settings
from planloop.core.models import Event, EventType, Severity, StepStatus
from planloop.supervisor.io.store_port import SessionStorePort

log = logging.getLogger(__name__)


class ConsumerNews(StrEnum):
    """What a look at the queue found worth telling."""

    NO_CONSUMER = "no_consumer"  # attempts wait and the queue has not shrunk for too long
    CONSUMER_BACK = "consumer_back"  # after a warning, a worker consumes again


@dataclass
class ConsumerWatch:
    """When a worker was last seen consuming, and whether this episode was warned about.

    Args:
        warn_after_s: seconds without consumption, attempts waiting, before the warning.
        since: when a worker was last seen consuming (or nothing waited).
    """

    warn_after_s: float
    since: float
    length: int | None = None  # the queue's length at the last look
    warned_at: float | None = None  # set while an episode that was warned about lasts

    def consumed(self, now: float) -> None:
        """A worker consumed (the queue shrank, or one of our attempts was claimed), or
        nothing of ours waits: the clock of an episode starts again."""
        self.since = now

    def look(self, now: float, length: int) -> None:
        """The queue's length now: shorter than at the last look means a worker consumes."""
        if length == 0 or (self.length is not None and length < self.length):
            self.consumed(now)
        self.length = length

    def due(self, now: float) -> bool:
        """Time to check our attempts and warn: nothing consumed for ``warn_after_s``."""
        return self.warned_at is None and now - self.since > self.warn_after_s

    def waited_s(self, now: float) -> float:
        return now - self.since

    def warn(self, now: float) -> None:
        self.warned_at = now

    def news(self) -> ConsumerNews | None:
        """CONSUMER_BACK once a warned episode ended (the warning state is reset)."""
        if self.warned_at is not None and self.since > self.warned_at:
            self.warned_at = None
            return ConsumerNews.CONSUMER_BACK
        return None


class ConsumerMonitor:
    """One session's watch on the step queue: looks, warns, clears (log, note, event).

    The session loop calls :meth:`tick` on each turn; it does something at most every
    ``LOOK_INTERVAL_S`` (one LLEN when attempts are in flight), or on every turn while a
    warning holds.
    """

    LOOK_INTERVAL_S = 1.0
    SHARED_LOOK_S = 0.5  # a length another session read this recently is good enough

    def __init__(
        self,
        store: SessionStorePort,
        sid: str,
        settings: Settings,
        append_event: Callable[[Event], Awaitable[None]],
        queue_of: Callable[[str], str] | None = None,
    ) -> None:
        self.store = store
        self.sid = sid
        self.base = settings.queue
        self.queue = settings.queue  # the queue(s) looked at last, as the warning names them
        # step id -> the queue its attempt was sent to (core/routing.py): the queues watched
        self.queue_of = queue_of or (lambda _step: self.base)
        self.watch = ConsumerWatch(settings.no_consumer_warning_s, time.time())
        self._append_event = append_event
        self._next_look = 0.0
        self._restored = False

    def first_owner(self) -> None:
        """The session was never owned before: no former owner's warning to restore."""
        self._restored = True

    def next_look(self, now: float) -> float:
        """When :meth:`tick` has something to do while attempts are in flight: every
        ``LOOK_INTERVAL_S`` while a warning holds (or a former owner's may), otherwise when
        this episode could become due for a warning. A queue that shrank or an attempt
        claimed meanwhile is seen then (the length is compared with the last look's, and
        the attempts are read), so the session need not look every second."""
        watch = self.watch
        if watch.warned_at is not None or not self._restored:
            return now + self.LOOK_INTERVAL_S
        return max(self._next_look, watch.since + watch.warn_after_s + self.LOOK_INTERVAL_S)

    async def tick(self, now: float, running: Callable[[], dict[str, int]]) -> None:
        """Look at the queue if it is time; warn or clear. ``running`` gives step id ->
        attempt of what the session dispatched and has not seen end."""
        watch = self.watch
        if not self._restored:
            # A former owner's warning still holds: ours to clear, not to repeat.
            self._restored = True
            note = await self.store.last_note(self.sid, [n.value for n in ConsumerNews])
            if note is not None and note.get("kind") == ConsumerNews.NO_CONSUMER:
                watch.since = watch.warned_at = float(note.get("at") or now)
        # Every turn while a warning holds (its all-clear must not wait for the session's
        # end); otherwise once per look interval.
        if watch.warned_at is None and now < self._next_look:
            return
        attempts = running()
        if not attempts:
            watch.consumed(now)  # nothing of ours waits
        elif now >= self._next_look:
            self._next_look = now + self.LOOK_INTERVAL_S
            # The queues our attempts were sent to; their total shrinking means consumption.
            queues = sorted({self.queue_of(step) or self.base for step in attempts})
            self.queue = ", ".join(queues)
            length = 0
            for queue in queues:
                length += await self.store.queue_length(queue, max_age_s=self.SHARED_LOOK_S)
            watch.look(now, length)
            if watch.due(now):
                await self._check_unclaimed(now, attempts)
        if watch.news() == ConsumerNews.CONSUMER_BACK:
            log.info("session=%s queue %s is consumed again", self.sid, self.queue)
            await self.store.note_progress(
                self.sid, ConsumerNews.CONSUMER_BACK.value, queue=self.queue
            )
            await self._append_event(self._event(ConsumerNews.CONSUMER_BACK, 0.0))

    async def _check_unclaimed(self, now: float, attempts: dict[str, int]) -> None:
        """Warn if our attempts still wait unclaimed; a claim since the last consumption
        seen means workers consume after all."""
        fresh = await self.store.steps(self.sid, sorted(attempts))
        running = [
            (i, st)
            for i, st in fresh.items()
            if st.status == StepStatus.RUNNING and st.attempt == attempts[i]
        ]
        waiting = sorted(i for i, st in running if not st.started_at)
        claimed = max((st.started_at for _, st in running), default=0.0)
        watch = self.watch
        if not waiting:
            watch.consumed(now)
            return
        if claimed > watch.since:
            watch.consumed(claimed)
            return
        watch.warn(now)
        waited = watch.waited_s(now)
        log.warning(
            "session=%s no worker consumed queue %s for %.0fs: %d attempt(s) wait (steps %s); "
            "start a worker on that queue (planloop worker)",
            self.sid,
            self.queue,
            waited,
            len(waiting),
            ", ".join(waiting[:5]),
        )
        await self.store.note_progress(
            self.sid,
            ConsumerNews.NO_CONSUMER.value,
            queue=self.queue,
            waited_s=round(waited),
            waiting=len(waiting),
        )
        await self._append_event(self._event(ConsumerNews.NO_CONSUMER, waited))

    def _event(self, news: ConsumerNews, waited_s: float) -> Event:
        """The stream's record of a warning (or its end): a supervisor ``notice``, which the
        loop records and shows but never deliberates about (a re-plan cannot start workers)."""
        if news == ConsumerNews.NO_CONSUMER:
            severity = Severity.WARNING
            text = f"no worker consumed queue {self.queue} for {waited_s:.0f} s"
        else:
            severity, text = Severity.INFO, f"a worker consumes queue {self.queue} again"
        return Event(
            type=EventType.EXTERNAL_SIGNAL,
            severity=severity,
            description=text,
            payload={"notice": news.value, "queue": self.queue, "waited_s": round(waited_s)},
        )
