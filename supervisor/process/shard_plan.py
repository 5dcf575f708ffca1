"""Which session shards a supervisor takes and which it gives back: pure decisions.

Every supervisor looks at the same picture each round (who holds each shard's lease, which
supervisors renewed lately) and decides for itself, so no coordinator is needed:

1. **Fair share**: ``ceil(shards / live supervisors)``. Live means the supervisor looked at
   the shards within the lease TTL (``pl:shard-holders``, written by each look) and its hold
   has not lapsed (core/shards.py ``gone_holders``): a dead one stops counting as soon as
   its hold expires, and one too busy to look is not counted as a peer to give shards to.
2. **Take** free shards up to the fair share at once (in an order of its own per supervisor,
   so two newcomers rarely race for the same shard; the lease's SET NX settles a race).
3. **Take orphans**: a shard free for ``grace_s`` or longer is taken whatever the share: the
   supervisors under their share had that long to take it. A dead supervisor's shards are
   taken at once when nobody else is alive; otherwise by those under their share.
4. **Give back** what is over the fair share while a live peer holds less than it (a new
   supervisor appeared), the shards running fewest sessions first (cheapest to move). A
   shard is given back at a safe point: its loops stopped first, then its lease released.

Shares settle without oscillation: a supervisor at or under its share never gives back, and
one at its share takes only orphans.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ShardView:
    """One round's picture, as the supervisor ``me`` read it."""

    me: str
    shards: int
    holders: Mapping[int, str | None]  # shard -> the supervisor holding its lease (None: free)
    live: Collection[str]  # supervisors that renewed lately (``me`` counts anyway)
    free_since: Mapping[int, float] = field(default_factory=dict)  # shard -> first seen free
    now: float = 0.0
    grace_s: float = 1.5


@dataclass(frozen=True)
class ShardMoves:
    take: list[int]
    give_back: list[int]
    lost: list[int] = field(default_factory=list)  # held here, found held by another


def fair_share(shards: int, live: Collection[str], me: str) -> int:
    """Shards per supervisor, rounded up: every shard finds an owner."""
    return math.ceil(shards / max(1, len(set(live) | {me})))


def plan_moves(view: ShardView, running: Mapping[int, int] | None = None) -> ShardMoves:
    """What ``view.me`` does this round. ``running``: sessions running per shard it holds."""
    fair = fair_share(view.shards, view.live, view.me)
    mine = [s for s in range(view.shards) if view.holders.get(s) == view.me]
    free = sorted(
        (s for s in range(view.shards) if view.holders.get(s) is None),
        key=lambda s: zlib.crc32(f"{view.me}/{s}".encode()),
    )
    take = free[: max(0, fair - len(mine))]
    orphans = [
        s
        for s in free
        if s not in take and view.now - view.free_since.get(s, view.now) >= view.grace_s
    ]
    give_back: list[int] = []
    if len(mine) > fair and _someone_needs_shards(view, fair):
        load = running or {}
        give_back = sorted(mine, key=lambda s: (load.get(s, 0), s))[: len(mine) - fair]
    return ShardMoves(take=sorted(take + orphans), give_back=give_back)


def _someone_needs_shards(view: ShardView, fair: int) -> bool:
    """A live peer holds fewer shards than it could hold without taking anyone's share."""
    held: dict[str, int] = {}
    for owner in view.holders.values():
        if owner is not None:
            held[owner] = held.get(owner, 0) + 1
    floor = view.shards // max(1, len(set(view.live) | {view.me}))
    return any(held.get(peer, 0) < floor for peer in view.live if peer != view.me)


def update_free_since(
    previous: Mapping[int, float], holders: Mapping[int, str | None], shards: int, now: float
) -> dict[int, float]:
    """When each shard free now was first seen free (kept across rounds while it stays so)."""
    return {s: previous.get(s, now) for s in range(shards) if holders.get(s) is None}
