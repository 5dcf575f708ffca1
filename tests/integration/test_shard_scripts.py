"""The Lua of session shards on a real Redis: a shard's epoch only grows, and adoption fences
exactly (ended, held alone, or adopted under a later epoch of the same shard: refused)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from planloop.core.keys import Keys
from planloop.core.lua import AcquireShard, AdoptSession, ReleaseLease

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


@pytest.fixture
def keys(redis_client: redis.Redis) -> Iterator[Keys]:
    prefix = f"shard{uuid.uuid4().hex[:10]}"
    yield Keys(prefix)
    stale = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


def test_a_shards_epoch_grows_with_every_take_whoever_takes_it(
    redis_client: redis.Redis, keys: Keys
) -> None:
    acquire, release = AcquireShard.register(redis_client), ReleaseLease.register(redis_client)

    def take(token: str) -> int:
        call = AcquireShard(
            shard_lease_key=keys.shard_lease(3),
            shard_epoch_key=keys.shard_epoch(3),
            token=token,
            ttl_ms=60_000,
        )
        return int(acquire(call))

    assert take("a:1") == 1
    assert take("b:1") == 0  # held
    assert release(ReleaseLease(lease_key=keys.shard_lease(3), token="b:1")) == 0
    assert release(ReleaseLease(lease_key=keys.shard_lease(3), token="a:1")) == 1
    assert take("b:1") == 2
    redis_client.delete(keys.shard_lease(3))  # expired
    assert take("a:2") == 3


def test_adoption_bumps_the_epoch_and_refuses_what_it_must(
    redis_client: redis.Redis, keys: Keys
) -> None:
    adopt = AdoptSession.register(redis_client)
    session = keys.session("s")
    redis_client.hset(session, mapping={"status": "running", "epoch": 4})

    def by(owner: str, shard_epoch: int, shard: str = "8/3") -> int:
        call = AdoptSession(
            lease_key=keys.lease("s"),
            session_key=session,
            owner=owner,
            shard=shard,
            shard_epoch=shard_epoch,
        )
        return int(adopt(call))

    assert by("a", 5) == 5
    assert redis_client.hmget(session, "owner", "shard", "shard_epoch") == ["a", "8/3", "5"]
    assert by("b", 6) == 6  # the shard moved: the new owner fences the former one
    assert by("a", 5) == 0  # a paused former owner cannot take it back
    assert redis_client.hget(session, "owner") == "b"
    assert by("c", 1, shard="16/3") == 7  # another shard count: its epochs start again
    redis_client.set(keys.lease("s"), "old-release:tok", px=60_000)  # held alone
    assert by("d", 9, shard="16/3") == 0
    redis_client.delete(keys.lease("s"))
    redis_client.hset(session, "status", "completed")  # ended is final
    assert by("d", 9, shard="16/3") == 0
    redis_client.delete(session)  # no hot state: left to the rebuild path
    assert by("d", 9, shard="16/3") == 0
    assert not redis_client.exists(session)
