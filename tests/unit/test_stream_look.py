"""A look at a session's stream sends no BLOCK: Redis times a blocked read out in its cron,
so even BLOCK 1 on an empty stream answers up to 100 ms later on a quiet server."""

from __future__ import annotations

import asyncio
from typing import Any

from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.supervisor.io.redis_streams import RedisStreams


class RecordingRedis:
    """Answers XREADGROUP with one entry of the stream read, and keeps the call's options."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def xreadgroup(
        self, group: str, consumer: str, streams: dict[str, str], **options: Any
    ) -> Any:
        self.calls.append({"group": group, "consumer": consumer, **options})
        return [(stream, [("1-0", {"type": "x"})]) for stream in streams]


def streams_on(client: RecordingRedis) -> RedisStreams:
    streams = RedisStreams()
    streams.r = client  # type: ignore[assignment]
    streams.keys = Keys("t")
    return streams


def test_a_look_sends_no_block() -> None:
    client = RecordingRedis()
    entries = asyncio.run(streams_on(client).read_events("s", "sup", count=5, block_ms=None))
    assert entries == [("1-0", {"type": "x"})]
    assert client.calls == [{"group": EVENTS_GROUP, "consumer": "sup", "count": 5, "block": None}]


def test_a_wait_blocks_as_long_as_asked() -> None:
    client = RecordingRedis()
    asyncio.run(streams_on(client).read_events("s", "sup", count=5, block_ms=300))
    assert client.calls[0]["block"] == 300
