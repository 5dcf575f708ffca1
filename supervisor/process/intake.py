"""Intake of new sessions under shard ownership: every new session reaches its shard's owner.

Producers announce a new session on the shared inbox (``pl:inbox``, one consumer group for
every supervisor), so any supervisor may read it. The reader starts the session itself only
when it holds the session's shard; otherwise it forwards the id to the shard's owner (read
from the shard's lease) on that owner's own inbox (``pl:inbox:to:{<name>}``), which the owner
reads in the same blocking call as the shared one. Nothing is lost or started twice when a
shard moves: a session is adopted only by the holder of its shard (``AdoptSession`` fences
the rest), and an id that finds its shard free, or keeps chasing a moving shard, is dropped
from the inbox on purpose: the shard's next owner looks at every active session of a shard
it takes, and every owner sweeps its shards' active sessions now and then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from planloop.core.keys import INBOX_GROUP, Keys
from planloop.core.shards import shard_of
from planloop.supervisor.process.shard_owner import read_holders

log = logging.getLogger(__name__)

MAX_HOPS = 4  # forwards of one id before it is left to the sweep (a shard moving meanwhile)
DIRECT_TTL_S = 86_400  # a dead supervisor's own inbox goes after a day
KEEP_DIRECT_S = 60.0  # how often a live supervisor pushes its own inbox's expiry back


@dataclass(frozen=True)
class Announced:
    """One inbox entry: the stream it was read from, its id, the session and its hops."""

    stream: str
    entry_id: str
    sid: str
    hops: int = 0


class Intake:
    """The shared inbox and the supervisor's own one, read together."""

    def __init__(self, client: aioredis.Redis, keys: Keys, name: str, shards: int) -> None:
        self.r, self.keys, self.name, self.shards = client, keys, name, shards
        self.direct = keys.direct_inbox(name)
        self._next_keep = 0.0

    async def ensure(self) -> None:
        """Create the consumer group of both streams (again after Redis lost its data)."""
        for stream in (self.keys.inbox, self.direct):
            try:
                await self.r.xgroup_create(stream, INBOX_GROUP, id="0", mkstream=True)
            except aioredis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def read(self, block_ms: int, count: int) -> list[Announced]:
        if time.monotonic() >= self._next_keep:  # ours never expires while we read it
            self._next_keep = time.monotonic() + KEEP_DIRECT_S
            await self.r.expire(self.direct, DIRECT_TTL_S)
        reply: Any = await self.r.xreadgroup(
            INBOX_GROUP,
            self.name,
            {self.keys.inbox: ">", self.direct: ">"},
            count=count,
            block=block_ms,
        )
        return [
            Announced(str(stream), entry_id, fields.get("sid", ""), int(fields.get("hops", 0)))
            for stream, entries in reply or []
            for entry_id, fields in entries
        ]

    async def forward(self, entries: Sequence[Announced], owns: Callable[[str], bool]) -> None:
        """Send each of ``entries`` whose shard is not held here to its shard's owner."""
        away = [e for e in entries if e.sid and not owns(e.sid)]
        if not away:
            return
        shards = [shard_of(e.sid, self.shards) for e in away]
        _, owners = await read_holders(self.r, self.keys, shards)
        pipe = self.r.pipeline(transaction=False)
        dropped = 0
        for entry, owner in zip(away, owners, strict=True):
            if owner is None or owner == self.name or entry.hops >= MAX_HOPS:
                dropped += 1  # its shard's next owner, or the sweep, finds it
                continue
            to = self.keys.direct_inbox(owner)
            pipe.xadd(to, {"sid": entry.sid, "hops": entry.hops + 1})
            pipe.expire(to, DIRECT_TTL_S)
        if len(pipe):
            await pipe.execute()
        if dropped:
            log.info("inbox: %d session(s) left to their shard's next owner", dropped)

    async def ack(self, entries: Sequence[Announced]) -> None:
        by_stream: dict[str, list[str]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.entry_id)
        if not by_stream:
            return
        pipe = self.r.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            pipe.xack(stream, INBOX_GROUP, *ids)
            pipe.xdel(stream, *ids)
        await pipe.execute()
