"""The supervisor's sweep reads the active set a slice at a time: one pass finds every
session that stays active through it, whatever the slice."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.supervisor.io.redis_store import SessionStore

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


def test_a_pass_of_slices_finds_every_active_session_once_at_least(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(f"{test_settings.key_prefix}:scan{uuid.uuid4().hex[:6]}")
    sids = {f"s{n:05d}" for n in range(2_500)}
    redis_client.sadd(keys.active, *sids)

    async def one_pass() -> tuple[int, set[str]]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        try:
            steps, seen, cursor = 0, set[str](), 0
            while True:
                cursor, found = await store.scan_active(cursor, 500)
                steps, seen = steps + 1, seen | set(found)
                if cursor == 0:
                    return steps, seen
        finally:
            await store.r.aclose()

    try:
        steps, seen = asyncio.run(one_pass())
    finally:
        redis_client.delete(keys.active)

    assert seen == sids
    assert steps > 1  # a slice at a time, not the whole set
