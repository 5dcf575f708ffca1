"""The session shards one supervisor holds: look, take, give back, lose, adopt sessions.

A supervisor owns sessions by holding their shards (core/shards.py). Each round it reads who
holds every shard, whose holds are alive and which supervisors are alive (two round trips,
whatever the number of sessions), decides what to take and give back
(process/shard_plan.py), and takes shards in a worker thread through the lease keeper, whose
token they are held under.

Fencing stays per session and exact: before a session's loop starts, :meth:`adopt` bumps the
session's epoch in its hash (``AdoptSession``), the token every write of the session carries
and is compared with. A paused former owner is refused from its next write on; one that
lost a shard while paused cannot adopt a session over a later owner of that shard (the
session hash keeps the shard epoch it was adopted under).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis

from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.lua import AdoptSession, ReleaseLease
from planloop.core.redis_faults import is_redis_fault
from planloop.core.shards import gone_holders, live_holders, shard_of
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.process.lease_keeper import LeaseKeeper
from planloop.supervisor.process.shard_plan import (
    ShardMoves,
    ShardView,
    plan_moves,
    update_free_since,
)

log = logging.getLogger(__name__)

HOLDERS_KEPT_S = 3_600.0  # a dead supervisor's entry in pl:shard-holders is dropped after this


async def read_holders(
    r: aioredis.Redis, keys: Keys, shards: Sequence[int]
) -> tuple[list[str | None], list[str | None]]:
    """Per shard of ``shards``, the token its key names and the supervisor holding it (None:
    free, also when its token's hold is gone); two round trips."""
    tokens = cast(list[str | None], await r.mget([keys.shard_lease(s) for s in shards]))
    named = sorted({t for t in tokens if t})
    flags: list[str | None] = []
    if named:
        flags = cast(list[str | None], await r.mget([keys.holder_alive(t) for t in named]))
    alive = {t for t, flag in zip(named, flags, strict=True) if flag}
    return tokens, live_holders(tokens, alive)


@dataclass
class HeldShard:
    """A shard this supervisor holds."""

    token: str
    epoch: int
    releasing: bool = False  # being given back: no session of it is adopted any more


class ShardOwner:
    """The shards of the supervisor ``name``; every method runs on the event loop except
    :meth:`leases` (read by the keeper's thread)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, name: str, settings: Settings) -> None:
        self.r, self.keys, self.name = client, keys, name
        self.shards, self.ttl_s = settings.session_shards, settings.lease_ttl_s
        self.held: dict[int, HeldShard] = {}
        self._seen: dict[int, str] = {}  # the token each shard's key named at the last look
        self._free_since: dict[int, float] = {}
        self._adopt = AdoptSession.register_async(client)
        self._release = ReleaseLease.register_async(client)
        self._shard_of: dict[str, int] = {}  # memo: a session's shard never changes

    def shard(self, sid: str) -> int:
        shard = self._shard_of.get(sid)
        if shard is None:
            shard = self._shard_of[sid] = shard_of(sid, self.shards)
        return shard

    def owns(self, sid: str) -> bool:
        """True when the session's shard is held here and not being given back."""
        held = self.held.get(self.shard(sid))
        return held is not None and not held.releasing

    def forget(self, sids: Sequence[str]) -> None:
        for sid in sids:
            self._shard_of.pop(sid, None)

    async def look(self, running: Mapping[int, int]) -> ShardMoves:
        """Say this supervisor is alive, read who holds every shard and who else is alive;
        what to take and give back, and the shards held here whose key names someone else
        now (``lost``: taken over while this process was cut off, or a write Redis lost in
        a failover). Alive is said here, by the event loop, not by the lease keeper's
        thread: a supervisor too busy to come round to its shard moves is not counted as a
        peer to give shards to."""
        now = time.time()
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(self.keys.shard_holders, {self.name: now})
        pipe.zrangebyscore(self.keys.shard_holders, now - self.ttl_s, "+inf")
        pipe.zremrangebyscore(self.keys.shard_holders, "-inf", now - HOLDERS_KEPT_S)
        _, live, _ = await pipe.execute()
        tokens, found = await read_holders(self.r, self.keys, range(self.shards))
        # A dead supervisor's shards are taken once its hold lapses, not a TTL later when
        # its last look ages out of the holders set.
        gone = gone_holders(tokens, found) - {self.name}
        self._seen = {s: t or "" for s, t in enumerate(tokens)}
        lost = [s for s, h in self.held.items() if not h.releasing and tokens[s] != h.token]
        for shard in lost:
            del self.held[shard]
        holders = dict(enumerate(found))
        for shard, held in self.held.items():  # ours until the keeper or a look says not
            holders[shard] = self.name if not held.releasing else holders[shard]
        mono = time.monotonic()
        self._free_since = update_free_since(self._free_since, holders, self.shards, mono)
        view = ShardView(
            me=self.name,
            shards=self.shards,
            holders=holders,
            live=[str(x) for x in live if str(x) not in gone],
            free_since=self._free_since,
            now=mono,
            grace_s=self.ttl_s,
        )
        return dataclasses.replace(plan_moves(view, running), lost=lost)

    async def take(self, keeper: LeaseKeeper, shards: Sequence[int]) -> list[int]:
        """Take ``shards`` (as the last look saw them); those taken (now held here)."""
        wanted = [s for s in shards if s not in self.held]
        if not wanted:
            return []
        takes = [(s, self._seen.get(s, "")) for s in wanted]
        token, epochs = await asyncio.to_thread(keeper.take, takes)
        taken = []
        for shard, epoch in zip(wanted, epochs, strict=True):
            if epoch:
                self.held[shard] = HeldShard(token, epoch)
                taken.append(shard)
        if taken:
            log.info("shards taken: %s (%d held)", _ranges(taken), len(self.held))
        return taken

    def lose_all(self) -> None:
        self.held.clear()

    async def release(self, shard: int) -> None:
        """Let ``shard`` go now (its loops stopped): a peer takes it without waiting."""
        held = self.held.pop(shard, None)
        if held is None:
            return
        try:
            await self._release(
                ReleaseLease(lease_key=self.keys.shard_lease(shard), token=held.token)
            )
        except aioredis.RedisError as exc:  # free anyway once the hold ends
            if not is_redis_fault(exc):
                raise

    async def give_back(self, shards: Sequence[int], tasks: Sequence[asyncio.Task[None]]) -> None:
        """Give ``shards`` back at a safe point: adopt nothing more of them, stop their
        session loops (``tasks``: as at a stop), then release their leases."""
        for shard in shards:
            if shard in self.held:
                self.held[shard].releasing = True
        stopping = [task for task in tasks if not task.done()]
        log.info("giving back shards %s: stopping %d loops", _ranges(shards), len(stopping))
        for task in stopping:
            task.cancel()
        if stopping:  # a loop still stopping after this is fenced by its next owner's epoch
            await asyncio.wait(stopping, timeout=self.ttl_s)
        for shard in shards:
            await self.release(shard)

    async def release_all(self) -> None:
        for shard in list(self.held):
            await self.release(shard)

    async def adopt(self, sids: Sequence[str]) -> list[Taken]:
        """Adopt ``sids``, each with its session hash as read right after: one round trip
        for all. ``epoch`` 0: not adopted (its shard is not held here, or AdoptSession
        refused it: it says why)."""
        mine = [sid for sid in sids if self.owns(sid)]
        pipe = self.r.pipeline(transaction=False)
        for sid in mine:
            shard = self.shard(sid)
            call = AdoptSession(
                lease_key=self.keys.lease(sid),
                session_key=self.keys.session(sid),
                owner=self.name,
                shard=f"{self.shards}/{shard}",
                shard_epoch=self.held[shard].epoch,
            )
            await self._adopt(call, client=pipe)
            pipe.hgetall(self.keys.session(sid))
        replies = await pipe.execute() if mine else []
        adopted = {
            sid: Taken(sid, int(epoch), cast(dict[str, str], fields))
            for sid, epoch, fields in zip(mine, replies[::2], replies[1::2], strict=True)
        }
        return [adopted.get(sid) or Taken(sid, 0, {}) for sid in sids]


def _ranges(shards: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5`` (for a log line)."""
    out: list[str] = []
    for s in sorted(shards):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ",".join(out)
