"""Admission: a session just taken gets its first dispatch before older sessions' bookkeeping.

One event loop drives every session a supervisor holds, and it is fair: each ready session
gets a turn in each lap. When a thousand sessions arrive at once, every one of them starts
at the same time, each start waits a whole lap per round trip, and the first dispatch of
all of them comes seconds later, at about the same moment. Admission turns that into a
queue with a short lap:

- at most ``slots`` sessions start at once (loading, claiming, their first dispatch), in
  the order they were taken; the others wait for a slot (``PLANLOOP_ADMISSION_SLOTS``: a
  burst starts in waves of that many, each wave's first dispatches waiting for the whole
  wave's loads; more slots make fewer, longer waves: bench/README.md);
- while a burst of sessions waits to start or is starting (``BURST_MIN`` or more holding
  or waiting for slots, or the inbox reader behind, below), the loops of sessions already
  running wait (at most ``max_defer_s`` per turn, so they are never starved) before they
  apply what they read and before they end: the laps are made of starts
  (``PLANLOOP_ADMISSION_MAX_DEFER_S``). A few sessions starting (one submitted as another
  ends, say) do not hold the others: each waiting running session would pay the start's
  round trips on its own released steps and its end, for a start that gains a lap at most;
- while the inbox reader is behind (a read finds a backlog of ``BURST_MIN`` sessions or
  more), the whole burst counts as starting, not only the batch being started: between two
  batches the loops of the sessions just started would otherwise all wake to apply what they
  read, and the next batch would wait for them. A burst lasts until a read finds less
  than that, or ``max_defer_s`` at a stretch (then the loops already running get a turn).

Pure asyncio bookkeeping, unit-tested without Redis (tests/unit/test_admission.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

DEFAULT_SLOTS = 200  # the settings' defaults (config/settings.py)
DEFAULT_MAX_DEFER_S = 2.0
BURST_MIN = 8  # sessions found waiting in one inbox read: the reader is behind


class Admission:
    """The process's start queue and the gate older sessions wait at."""

    def __init__(self, slots: int = DEFAULT_SLOTS, max_defer_s: float = DEFAULT_MAX_DEFER_S):
        if slots < 1:
            raise ValueError(f"admission needs at least one slot (got {slots})")
        self.max_defer_s = max_defer_s
        self._slots = asyncio.Semaphore(slots)
        self._starting = 0  # sessions waiting for a slot or holding one, and batches
        self._in_slots = 0  # sessions waiting for a slot or holding one
        self._quiet = asyncio.Event()  # set while nothing starts
        self._quiet.set()
        self._burst_since: float | None = None  # when the inbox reader fell behind

    @property
    def starting(self) -> int:
        """Sessions that wait to start or are starting."""
        return self._starting

    @contextlib.asynccontextmanager
    async def start(self) -> AsyncIterator[None]:
        """Hold a start slot (first come, first served) for the block: a session's start up
        to its first dispatch."""
        self._in_slots += 1
        self._enter()
        try:
            async with self._slots:
                yield
        finally:
            self._in_slots -= 1
            self._leave()

    @contextlib.contextmanager
    def starting_batch(self) -> Iterator[None]:
        """Sessions start for the block without holding slots (the loops of a batch started
        from what it read, process/batch_start.py): counted as starting; the loops of
        sessions already running defer meanwhile when the batch is part of a burst (the
        inbox reader behind)."""
        self._enter()
        try:
            yield
        finally:
            self._leave()

    @property
    def in_burst(self) -> bool:
        """The inbox reader is behind: it reads again at once, and older loops defer."""
        return self._burst_since is not None

    def intake(self, found: int, now: float) -> None:
        """What the inbox reader's last read found (``now``: a monotonic clock): a backlog
        opens or continues a burst; less than that, or a burst ``max_defer_s`` old, ends it."""
        behind = found >= BURST_MIN
        if behind and self._burst_since is None:
            self._burst_since = now
            self._enter()
        elif self._burst_since is not None and (
            not behind or now - self._burst_since >= self.max_defer_s
        ):
            self._burst_since = None
            self._leave()

    def _enter(self) -> None:
        self._starting += 1
        self._settle()

    def _leave(self) -> None:
        self._starting -= 1
        self._settle()

    def _settle(self) -> None:
        """Quiet unless a burst starts: the inbox reader behind, or ``BURST_MIN`` sessions
        (or more) waiting for slots or holding them."""
        if self.in_burst or self._in_slots >= BURST_MIN:
            self._quiet.clear()
        else:
            self._quiet.set()

    async def defer(self) -> None:
        """Let a burst of sessions that start go first: wait until it has started, or
        ``max_defer_s``; a few sessions starting do not hold anyone."""
        if self._quiet.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._quiet.wait(), self.max_defer_s)
