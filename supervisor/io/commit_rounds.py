"""Which queued checkpoint batches a commit round takes (supervisor/io/group_commit.py).

A flush (a session's end, a start's claim) marks its batch urgent: the next round takes the
urgent batches, and those that already waited ``max_wait_s`` so none waits for ever under
a stream of flushes, and leaves the others to the round after. A waiter pays for a small
transaction, not for every session's turn since the last commit. With nothing urgent a
round takes every batch. Pure: unit-tested in tests/unit/test_group_commit.py.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Protocol, TypeVar


class Queued(Protocol):
    urgent: bool  # a flush waits for it
    since: float  # when it was queued (the caller's clock)


K = TypeVar("K", bound=Hashable)
Q = TypeVar("Q", bound=Queued)


def take_round(queued: Mapping[K, Q], now: float, max_wait_s: float) -> tuple[list[Q], dict[K, Q]]:
    """The round's batches, and those it leaves queued (in their order)."""
    if not any(q.urgent for q in queued.values()):
        return list(queued.values()), {}
    kept = {k: q for k, q in queued.items() if not q.urgent and now - q.since < max_wait_s}
    return [q for k, q in queued.items() if k not in kept], kept
