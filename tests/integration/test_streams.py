"""Event streams are trimmed, but never past an entry that is still pending."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.models import Event, EventType
from planloop.supervisor.io.redis_store import SessionStore

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


def test_trim_keeps_the_newest_entries_and_everything_pending(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys, sid = Keys(test_settings.key_prefix), f"trim-{uuid.uuid4().hex[:6]}"
    stream = keys.events(sid)
    redis_client.xgroup_create(stream, EVENTS_GROUP, id="0", mkstream=True)
    ids = [
        redis_client.xadd(stream, Event(type=EventType.TASK_COMPLETED, step_id=f"s{i}").to_fields())  # type: ignore[arg-type]
        for i in range(30)
    ]
    redis_client.xreadgroup(EVENTS_GROUP, "c1", {stream: ">"}, count=30)
    redis_client.xack(stream, EVENTS_GROUP, *[i for n, i in enumerate(ids) if n != 5])

    async def trim(keep: int) -> int:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        try:
            return await store.trim_events(sid, keep)
        finally:
            await store.r.aclose()

    removed = asyncio.run(trim(10))
    remaining = [entry_id for entry_id, _ in redis_client.xrange(stream)]  # type: ignore[union-attr]
    assert removed == 5
    assert remaining == ids[5:]  # entry 5 is still pending: nothing from it on is cut

    redis_client.xack(stream, EVENTS_GROUP, ids[5])
    assert asyncio.run(trim(10)) == 15
    assert [entry_id for entry_id, _ in redis_client.xrange(stream)] == ids[20:]  # type: ignore[union-attr]
    redis_client.delete(stream)
