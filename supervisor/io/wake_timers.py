"""One timer heap for every parked session of a supervisor.

A session with nothing to do until an event or a time (a retry's back-off ending, its
deadline) parks on its mailbox; the time goes here. Ten thousand parked sessions are one heap
and at most one event-loop timer (for the earliest entry), never a timer or a wake-up per
session: a session whose time has not come costs nothing.

:class:`TimerHeap` is the bookkeeping (pure, its clock passed in); :class:`WakeTimers` puts
its head on the running event loop and calls what is due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

Wake = Callable[[], None]
COMPACT_SLACK = 64  # cancelled entries tolerated in the heap beyond the live ones
CLOCK_SLACK_S = 0.001


class TimerHeap:
    """At most one timer per key; setting a key again replaces its timer."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int, Wake]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def set(self, key: str, due: float, wake: Wake) -> None:
        """Call ``wake`` once the clock reaches ``due`` (unless cancelled or set again)."""
        seq = next(self._seq)
        self._live[key] = (due, seq, wake)
        heapq.heappush(self._heap, (due, seq, key))
        # Entries replaced or cancelled stay in the heap until they reach its head; a heap
        # mostly made of them is rebuilt, so memory follows the live timers.
        if len(self._heap) > 2 * len(self._live) + COMPACT_SLACK:
            self._heap = [(d, s, k) for k, (d, s, _) in self._live.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: str) -> None:
        self._live.pop(key, None)

    def next_due(self) -> float | None:
        """When the earliest live timer is due (None: none is set)."""
        self._drop_dead_head()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[Wake]:
        """Remove every timer due at ``now`` and return their wakes, earliest first."""
        wakes: list[Wake] = []
        while True:
            self._drop_dead_head()
            if not self._heap or self._heap[0][0] > now:
                return wakes
            _, _, key = heapq.heappop(self._heap)
            wakes.append(self._live.pop(key)[2])

    def _drop_dead_head(self) -> None:
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][2], (0.0, -1))[1] != heap[0][1]:
            heapq.heappop(heap)


class WakeTimers:
    """The heap on the running event loop: one ``call_at`` for its head, moved as it changes.

    Times are the event loop's clock (``loop.time()``, monotonic).
    """

    def __init__(self) -> None:
        self.heap = TimerHeap()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None

    def __len__(self) -> int:
        return len(self.heap)

    def wake_in(self, key: str, delay_s: float, wake: Wake) -> None:
        """Call ``wake`` after ``delay_s`` seconds, replacing ``key``'s timer if it had one."""
        loop = asyncio.get_running_loop()
        due = loop.time() + max(delay_s, 0.0)
        self.heap.set(key, due, wake)
        if self._armed_at is None or due < self._armed_at:
            self._arm(loop, due)

    def cancel(self, key: str) -> None:
        # The loop timer stays where it is: firing early for a cancelled head costs one
        # look at the heap, cheaper than moving the timer on every cancel.
        self.heap.cancel(key)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._armed_at = None

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = due
        self._handle = loop.call_at(due, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = self._armed_at = None
        # asyncio runs a timer up to its clock resolution early: what is due by then is due.
        for wake in self.heap.pop_due(loop.time() + CLOCK_SLACK_S):
            wake()
        due = self.heap.next_due()
        if due is not None:
            self._arm(loop, due)
