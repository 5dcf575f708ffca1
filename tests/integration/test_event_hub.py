"""The event hub: one XREADGROUP for many sessions, each gets its own events, pending as before."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, ClassVar

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.models import Event, EventType
from planloop.supervisor.io.event_hub import EventHub
from planloop.supervisor.io.redis_store import SessionStore

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]
CONSUMER = "hub-test"


class Recording:
    """The hub's store client, noting the BLOCK of each XREADGROUP it sends itself and
    counting its CLIENT UNBLOCKs."""

    blocks: ClassVar[list[int | None]] = []
    unblocks: ClassVar[int] = 0

    def __init__(self, client: Any) -> None:
        self._client = client
        Recording.blocks = []
        Recording.unblocks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def xreadgroup(self, *args: Any, **options: Any) -> Any:
        Recording.blocks.append(options.get("block"))
        return await self._client.xreadgroup(*args, **options)

    async def client_unblock(self, *args: Any, **options: Any) -> Any:
        Recording.unblocks += 1
        return await self._client.client_unblock(*args, **options)


def _event(step: str) -> dict[str, str]:
    return Event(type=EventType.TASK_COMPLETED, step_id=step).to_fields()


def test_each_waiting_session_gets_its_own_events_and_they_stay_pending(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(test_settings.key_prefix)
    sids = [f"hub-{uuid.uuid4().hex[:6]}" for _ in range(20)]
    for sid in sids:
        redis_client.xgroup_create(keys.events(sid), EVENTS_GROUP, id="0", mkstream=True)

    async def scenario() -> dict[str, list[str]]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        hub = EventHub(test_settings.redis_url, store.r, keys, CONSUMER, count=100)
        try:
            # Half the sessions wait before anything is written (the hub blocks on them),
            # the others join while it blocks: they must unblock it, not wait it out.
            first = [asyncio.create_task(hub.read(s, count=100, block_ms=5_000)) for s in sids[:10]]
            await asyncio.sleep(0.2)
            late = [asyncio.create_task(hub.read(s, count=100, block_ms=5_000)) for s in sids[10:]]
            await asyncio.sleep(0.2)
            for sid in sids:
                await store.r.xadd(keys.events(sid), _event(f"{sid}-step"))  # type: ignore[arg-type]
            results = await asyncio.wait_for(asyncio.gather(*first, *late), 3.0)
            # Nothing more: a read times out empty after about its block time.
            empty = await hub.read(sids[0], count=100, block_ms=100)
            assert empty == []
            return {
                sid: [fields["step_id"] for _, fields in entries]
                for sid, entries in zip(sids, results, strict=True)
            }
        finally:
            await hub.close()
            await store.r.aclose()

    got = asyncio.run(scenario())
    assert got == {sid: [f"{sid}-step"] for sid in sids}
    for sid in sids:  # read, not acknowledged: pending under the consumer, as XREADGROUP leaves it
        pending = redis_client.xpending(keys.events(sid), EVENTS_GROUP)
        assert pending["pending"] == 1  # type: ignore[index]
        assert pending["consumers"][0]["name"] == CONSUMER  # type: ignore[index]
        redis_client.delete(keys.events(sid))


def test_a_session_whose_group_is_gone_gets_the_error_and_the_others_their_events(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(test_settings.key_prefix)
    good, gone = f"hub-{uuid.uuid4().hex[:6]}", f"hub-{uuid.uuid4().hex[:6]}"
    redis_client.xgroup_create(keys.events(good), EVENTS_GROUP, id="0", mkstream=True)

    async def scenario() -> tuple[list[str], BaseException | None]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        hub = EventHub(test_settings.redis_url, store.r, keys, CONSUMER, count=100)
        try:
            await store.r.xadd(keys.events(good), _event("ok"))  # type: ignore[arg-type]
            results = await asyncio.gather(
                hub.read(good, count=100, block_ms=2_000),
                hub.read(gone, count=100, block_ms=2_000),
                return_exceptions=True,
            )
            ok = results[0]
            assert isinstance(ok, list)
            if not ok:  # the failed read was for both: the next one has it
                ok = await hub.read(good, count=100, block_ms=2_000)
            error = results[1] if isinstance(results[1], BaseException) else None
            return [fields["step_id"] for _, fields in ok], error
        finally:
            await hub.close()
            await store.r.aclose()

    steps, error = asyncio.run(scenario())
    assert steps == ["ok"]
    assert isinstance(error, redis.ResponseError)
    assert "NOGROUP" in str(error)
    redis_client.delete(keys.events(good))


def test_a_parked_read_waits_without_a_time_and_a_timed_one_is_woken_by_the_heap(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(test_settings.key_prefix)
    parked, timed = f"hub-{uuid.uuid4().hex[:6]}", f"hub-{uuid.uuid4().hex[:6]}"
    for sid in (parked, timed):
        redis_client.xgroup_create(keys.events(sid), EVENTS_GROUP, id="0", mkstream=True)

    async def scenario() -> tuple[list[str], bool, int]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        hub = EventHub(test_settings.redis_url, store.r, keys, CONSUMER, count=100)
        try:
            waiting = asyncio.create_task(hub.read(parked, count=100, block_ms=None))
            # The timed read comes back empty when its timer is due, the parked one stays.
            assert await asyncio.wait_for(hub.read(timed, count=100, block_ms=300), 5.0) == []
            still_parked = not waiting.done()
            timers_left = len(hub.timers)
            await store.r.xadd(keys.events(parked), _event("woken"))  # type: ignore[arg-type]
            got = await asyncio.wait_for(waiting, 5.0)
            return [f["step_id"] for _, f in got], still_parked, timers_left
        finally:
            await hub.close()
            await store.r.aclose()

    got, still_parked, timers_left = asyncio.run(scenario())
    assert got == ["woken"]
    assert still_parked
    assert timers_left == 0  # a parked read holds no timer
    for sid in (parked, timed):
        redis_client.delete(keys.events(sid))


def test_a_short_wait_is_the_hubs_on_its_timer_never_a_blocked_read_of_its_own(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    """However short, a wait gets what is there or what arrives through the hub's read, and
    comes back empty when its timer is due: never a blocked read of its own, which Redis
    would time out up to 100 ms late. It leaves no timer behind."""
    keys = Keys(test_settings.key_prefix)
    full, empty = f"hub-{uuid.uuid4().hex[:6]}", f"hub-{uuid.uuid4().hex[:6]}"
    for sid in (full, empty):
        redis_client.xgroup_create(keys.events(sid), EVENTS_GROUP, id="0", mkstream=True)
    redis_client.xadd(keys.events(full), _event("there"))  # type: ignore[arg-type]

    async def scenario() -> tuple[list[str], list[str], int, list[str]]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        hub = EventHub(test_settings.redis_url, Recording(store.r), keys, CONSUMER, count=100)
        try:
            there = await asyncio.wait_for(hub.read(full, count=100, block_ms=20), 5.0)
            nothing = await asyncio.wait_for(hub.read(empty, count=100, block_ms=20), 5.0)
            timers_left = len(hub.timers)
            await store.r.xadd(keys.events(empty), _event("later"))  # type: ignore[arg-type]
            later = await asyncio.wait_for(hub.read(empty, count=100, block_ms=20), 5.0)
            if not later:  # the timer came first on a slow machine: the next wait has it
                later = await asyncio.wait_for(hub.read(empty, count=100, block_ms=2_000), 5.0)
            return (
                [f["step_id"] for _, f in there],
                [f["step_id"] for _, f in nothing],
                timers_left,
                [f["step_id"] for _, f in later],
            )
        finally:
            await hub.close()
            await store.r.aclose()

    there, nothing, timers_left, later = asyncio.run(scenario())
    assert Recording.blocks == []  # no read of its own: the hub's reader read them all
    assert there == ["there"]
    assert nothing == []
    assert timers_left == 0
    assert later == ["later"]
    assert redis_client.xpending(keys.events(full), EVENTS_GROUP)["pending"] == 1
    for sid in (full, empty):
        redis_client.delete(keys.events(sid))


def test_a_session_in_a_turn_stays_in_the_read_and_finds_its_events_waiting(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    """A session that took its events and is busy (not waiting) is still read for: what
    arrives meanwhile is in its mailbox when it waits again, without unblocking the read;
    a session that never waited is not read for."""
    keys = Keys(test_settings.key_prefix)
    busy, parked, other, never = (f"hub-{uuid.uuid4().hex[:6]}" for _ in range(4))
    for sid in (busy, parked, other, never):
        redis_client.xgroup_create(keys.events(sid), EVENTS_GROUP, id="0", mkstream=True)

    async def scenario() -> tuple[list[str], list[str], int]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        hub = EventHub(test_settings.redis_url, Recording(store.r), keys, CONSUMER, count=100)
        try:
            waiting = asyncio.create_task(hub.read(parked, count=100, block_ms=None))
            await store.r.xadd(keys.events(busy), _event("first"))  # type: ignore[arg-type]
            first = await asyncio.wait_for(hub.read(busy, count=100, block_ms=5_000), 5.0)
            # busy is in its turn now; the parked session keeps the hub reading, and one
            # more starting to wait makes it read again with the sessions it holds.
            late = asyncio.create_task(hub.read(other, count=100, block_ms=None))
            await asyncio.sleep(0.2)
            unblocks = Recording.unblocks
            await store.r.xadd(keys.events(busy), _event("meanwhile"))  # type: ignore[arg-type]
            await store.r.xadd(keys.events(never), _event("unread"))  # type: ignore[arg-type]
            for _ in range(100):  # the hub's read delivers it as it arrives
                summary: Any = await store.r.xpending(keys.events(busy), EVENTS_GROUP)
                if summary["pending"] == 2:
                    break
                await asyncio.sleep(0.05)
            again = await asyncio.wait_for(hub.read(busy, count=100, block_ms=5_000), 5.0)
            waiting.cancel()
            late.cancel()
            return [f["step_id"] for _, f in first + again], [never], Recording.unblocks - unblocks
        finally:
            await hub.close()
            await store.r.aclose()

    got, _, unblocks = asyncio.run(scenario())
    assert got == ["first", "meanwhile"]
    assert unblocks == 0  # its stream was in the read all along
    assert redis_client.xpending(keys.events(never), EVENTS_GROUP)["pending"] == 0
    for sid in (busy, parked, other, never):
        redis_client.delete(keys.events(sid))


def test_the_sweep_wakes_a_parked_session_for_a_cancel_field_or_a_former_owners_entries(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(test_settings.key_prefix)
    quiet, cancelled, stuck = (f"hub-{uuid.uuid4().hex[:6]}" for _ in range(3))
    for sid in (quiet, cancelled, stuck):
        redis_client.xgroup_create(keys.events(sid), EVENTS_GROUP, id="0", mkstream=True)

    async def scenario() -> tuple[list[str], bool, bool, bool]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        hub = EventHub(test_settings.redis_url, store.r, keys, CONSUMER, count=100, sweep_s=3600)
        try:
            reads = {
                sid: asyncio.create_task(hub.read(sid, count=100, block_ms=None))
                for sid in (quiet, cancelled, stuck)
            }
            await asyncio.sleep(0.2)
            # An old producer sets only the field; a former owner read an entry of `stuck`.
            await store.r.hset(keys.session(cancelled), "cancel_requested", "stop")
            await store.r.xadd(keys.events(stuck), _event("late"))  # type: ignore[arg-type]
            entries = await asyncio.wait_for(reads.pop(stuck), 5.0)
            await store.r.xclaim(
                keys.events(stuck),
                EVENTS_GROUP,
                "former",
                min_idle_time=0,
                message_ids=[e for e, _ in entries],
            )  # the hub delivered it to us: hand it to a "former owner"
            reads[stuck] = asyncio.create_task(hub.read(stuck, count=100, block_ms=None))
            await asyncio.sleep(0.2)
            woken = sorted(await hub.sweep())
            await asyncio.wait_for(asyncio.gather(reads[cancelled], reads[stuck]), 5.0)
            return woken, reads[quiet].done(), hub.claim_due(stuck), hub.claim_due(stuck)
        finally:
            await hub.close()
            await store.r.aclose()

    woken, quiet_done, claim_first, claim_again = asyncio.run(scenario())
    assert woken == sorted([cancelled, stuck])
    assert not quiet_done  # nothing for it: still parked
    assert claim_first
    assert not claim_again  # said once per finding
    for sid in (quiet, cancelled, stuck):
        redis_client.delete(keys.events(sid), keys.session(sid))
