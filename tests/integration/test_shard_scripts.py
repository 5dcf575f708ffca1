"""Session shards on a real Redis: a shard's epoch only grows, adoption fences exactly (ended,
held alone, or adopted under a later epoch of the same shard: refused), and one liveness key
per supervisor run holds all its shards."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.lua import AcquireShard, AdoptSession, ReleaseLease
from planloop.core.models import SessionStatus
from planloop.core.shards import shard_holders
from planloop.supervisor.process.lease_keeper import LeaseKeeper

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

    def take(token: str, seen: str) -> int:
        call = AcquireShard(
            shard_lease_key=keys.shard_lease(3),
            shard_epoch_key=keys.shard_epoch(3),
            token=token,
            seen=seen,
        )
        return int(acquire(call))

    assert take("a:1", seen="") == 1
    assert take("b:1", seen="") == 0  # taken since it was seen free
    assert redis_client.get(keys.shard_lease(3)) == "a:1"
    assert redis_client.pttl(keys.shard_lease(3)) == -1  # held by a:1's liveness, not a TTL
    assert take("b:1", seen="a:1") == 2  # a:1's hold seen gone
    assert take("c:1", seen="a:1") == 0  # b:1 was first
    assert release(ReleaseLease(lease_key=keys.shard_lease(3), token="a:1")) == 0
    assert release(ReleaseLease(lease_key=keys.shard_lease(3), token="b:1")) == 1
    assert take("a:2", seen="") == 3


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


@pytest.mark.parametrize("status", [s.value for s in SessionStatus if s.ended])
def test_an_ended_session_is_never_adopted_again(
    redis_client: redis.Redis, keys: Keys, status: str
) -> None:
    session = keys.session("s")
    redis_client.hset(session, mapping={"status": status, "epoch": 4})
    call = AdoptSession(
        lease_key=keys.lease("s"), session_key=session, owner="a", shard="8/3", shard_epoch=1
    )

    assert AdoptSession.register(redis_client)(call) == 0
    assert redis_client.hget(session, "epoch") == "4"


def test_one_liveness_key_holds_every_shard_and_a_lapsed_hold_is_never_renewed(
    redis_client: redis.Redis, keys: Keys, test_settings: Settings
) -> None:
    """Shards taken under one token live and die with its liveness key: a lapse (a pause, or
    Redis losing the key) retires the token, and its shards are taken again under a new one."""

    async def scenario() -> None:
        lapsed: list[str] = []
        keeper = LeaseKeeper(
            test_settings.redis_url, keys, 1.5, owner="sup-a", all_lost=lapsed.append
        )
        keeper.start()
        try:
            token, epochs = await asyncio.to_thread(keeper.take, [(0, ""), (1, "")])
            assert epochs == [1, 1]
            alive = keys.holder_alive(token)
            assert redis_client.mget([keys.shard_lease(0), keys.shard_lease(1)]) == [token] * 2
            assert 0 < redis_client.pttl(alive) <= 1500
            await asyncio.sleep(2.0)  # past the TTL: renewed meanwhile
            assert redis_client.exists(alive)
            assert shard_holders(redis_client, keys, [0, 1, 2]) == ["sup-a", "sup-a", None]

            redis_client.delete(alive)  # as if this process had been paused past the TTL
            await wait_async(lambda: bool(lapsed), 5)
            assert keeper.token != token
            assert not redis_client.exists(alive), "a lapsed hold came back"
            assert shard_holders(redis_client, keys, [0, 1]) == [None, None]

            again, epochs = await asyncio.to_thread(keeper.take, [(0, token), (1, "stale")])
            assert again == keeper.token
            assert epochs == [2, 0]
        finally:
            await asyncio.to_thread(keeper.stop)
        assert not redis_client.exists(keys.holder_alive(again)), "stop ends the hold"

    asyncio.run(scenario())


async def wait_async(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
