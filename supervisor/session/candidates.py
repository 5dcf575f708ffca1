"""The steps that may be dispatchable, kept in plan order so a loop turn never re-sorts them."""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterable, Mapping


class Candidates:
    """A set of step ids that is scanned in plan order.

    Adding and discarding cost O(log n) and O(1); a scan pops only what it looks at, so a
    turn that dispatches k steps of a large plan costs O(k log n), not a sort of the plan.
    """

    def __init__(self, order: Mapping[str, int], members: Iterable[str] = ()) -> None:
        self._order = order
        self._members: set[str] = set()
        self._heap: list[tuple[int, str]] = []  # may hold discarded ids; skipped on scan
        self.update(members)

    def add(self, step_id: str) -> None:
        if step_id not in self._members:
            self._members.add(step_id)
            heapq.heappush(self._heap, (self._order.get(step_id, 0), step_id))

    def update(self, step_ids: Iterable[str]) -> None:
        for step_id in step_ids:
            self.add(step_id)

    def discard(self, step_id: str) -> None:
        self._members.discard(step_id)  # its heap entry goes when a scan reaches it

    def __contains__(self, step_id: object) -> bool:
        return step_id in self._members

    def __len__(self) -> int:
        return len(self._members)

    def scan(self) -> Generator[str, None, None]:
        """Members in plan order. What the caller discards meanwhile is dropped; the rest
        stays. Close the iterator (``contextlib.closing``) when stopping early."""
        seen: list[tuple[int, str]] = []
        try:
            while self._heap:
                entry = heapq.heappop(self._heap)
                if entry[1] not in self._members or (seen and seen[-1] == entry):
                    continue  # discarded, or a second entry of a re-added step
                seen.append(entry)
                yield entry[1]
        finally:
            for entry in seen:
                if entry[1] in self._members:
                    heapq.heappush(self._heap, entry)
