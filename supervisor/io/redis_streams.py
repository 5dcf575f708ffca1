"""A session's event stream and the supervisors' inbox, read and acknowledged through
their consumer groups (the Redis side of the store port's event methods)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from planloop.core.hot_state import dumps
from planloop.core.keys import EVENTS_GROUP, Keys


class RedisStreams:
    """The consumer-group calls of :class:`~planloop.supervisor.io.redis_store.SessionStore`."""

    r: aioredis.Redis
    keys: Keys

    # --- event consumption ----------------------------------------------------------------
    async def ensure_groups(self, sid: str) -> None:
        try:
            await self.r.xgroup_create(self.keys.events(sid), EVENTS_GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def claim_pending(
        self, sid: str, consumer: str, *, min_idle_ms: int = 0
    ) -> list[tuple[str, dict[str, str]]]:
        """Everything delivered but not acknowledged, taken over by ``consumer``.

        Only the lease holder calls this, so every other consumer of the session is a former
        owner whose writes are fenced off: their pending entries are ours now.
        """
        stream, taken, start = self.keys.events(sid), [], "0-0"
        while True:
            # Redis 6.2 replies [next start, entries]; Redis 7 adds a third element (the ids
            # of entries deleted from the stream), and redis-py passes either shape through.
            reply: Any = await self.r.xautoclaim(
                stream, EVENTS_GROUP, consumer, min_idle_time=min_idle_ms, start_id=start, count=500
            )
            start, entries = reply[0], reply[1]
            # 6.2 lists a deleted entry as a nil (redis-py: (None, None)); 7 drops it
            taken += [(entry_id, fields) for entry_id, fields in entries if fields]
            if start == "0-0":
                return taken

    async def read_events(
        self, sid: str, consumer: str, *, count: int, block_ms: int | None
    ) -> list[tuple[str, dict[str, str]]]:
        """New entries; ``block_ms`` None sends no BLOCK. A look must not block even briefly:
        Redis times a blocked read out in its cron (every 100 ms at the default ``hz``), so
        on a quiet server BLOCK 1 on an empty stream answers after up to 100 ms."""
        reply: Any = await self.r.xreadgroup(
            EVENTS_GROUP, consumer, {self.keys.events(sid): ">"}, count=count, block=block_ms
        )
        return [
            (entry_id, fields) for _stream, entries in reply or [] for entry_id, fields in entries
        ]

    async def ack(self, sid: str, entry_ids: Sequence[str]) -> None:
        if entry_ids:
            await self.r.xack(self.keys.events(sid), EVENTS_GROUP, *entry_ids)

    async def ack_many(self, acks: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Acknowledge the events of many sessions in one round trip."""
        acks = [(sid, ids) for sid, ids in acks if ids]
        if not acks:
            return
        pipe = self.r.pipeline(transaction=False)
        for sid, entry_ids in acks:
            pipe.xack(self.keys.events(sid), EVENTS_GROUP, *entry_ids)
        await pipe.execute()

    async def trim_events(self, sid: str, keep: int) -> int:
        """Trim the events stream to its newest ``keep`` entries, never past a pending one.

        Every entry below the cut is acknowledged and recorded in SQL already; returns how
        many entries went.
        """
        key = self.keys.events(sid)
        if await self.r.xlen(key) <= keep:
            return 0
        newest: Any = await self.r.xrevrange(key, count=keep)
        cutoff = newest[-1][0]
        pending: Any = await self.r.xpending(key, EVENTS_GROUP)
        if pending.get("pending") and stream_id(pending["min"]) < stream_id(cutoff):
            cutoff = pending["min"]
        return int(await self.r.xtrim(key, minid=cutoff, approximate=False))

    async def dead_letter(
        self,
        sid: str,
        entries: Sequence[tuple[str, dict[str, str]]],
        *,
        cause: str = "delivered too often",
    ) -> None:
        """Move events that cannot be applied to the dead-letter stream with their ``cause``
        (delivered too often, unreadable, crashed the session's loop), and acknowledge them."""
        if not entries:
            return
        pipe = self.r.pipeline(transaction=True)
        for entry_id, fields in entries:
            pipe.xadd(
                self.keys.deadletter,
                {"sid": sid, "entry_id": entry_id, "event": dumps(fields), "cause": cause},
            )
        pipe.xack(self.keys.events(sid), EVENTS_GROUP, *[e for e, _ in entries])
        await pipe.execute()

    async def delivery_counts(self, sid: str, entry_ids: Sequence[str]) -> dict[str, int]:
        """How often each of ``entry_ids`` (pending) was delivered."""
        if not entry_ids:
            return {}
        # Ids order as (ms, seq) numbers: as strings "…-10" sorts before "…-9", and a range
        # cut that way would miss entries (and let a poison event escape dead-lettering).
        rows: Any = await self.r.xpending_range(
            self.keys.events(sid),
            EVENTS_GROUP,
            min=min(entry_ids, key=stream_id),
            max=max(entry_ids, key=stream_id),
            count=len(entry_ids) * 2,
        )
        return {row["message_id"]: int(row["times_delivered"]) for row in rows}


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id as the numbers it orders by."""
    millis, _, seq = entry_id.partition("-")
    return int(millis), int(seq or 0)
