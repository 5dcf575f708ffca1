"""One conformance suite for the session loop's store port: the Redis store and its in-memory
twin answer the same calls the same way (so the loop's unit tests on the twin hold on Redis)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.models import Event, EventType, StepStatus
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.io.redis_store import SessionStore
from planloop.supervisor.io.store_port import SessionStorePort

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

Own = Callable[[str, int], Awaitable[None]]


@pytest.fixture(params=["redis", "memory"])
def backend(
    request: pytest.FixtureRequest, test_settings: Settings, redis_client: redis.Redis
) -> Iterator[tuple[str, Keys]]:
    keys = Keys(f"{test_settings.key_prefix}:port{uuid.uuid4().hex[:6]}")
    yield str(request.param), keys
    for key in redis_client.scan_iter(match=f"{keys.prefix}:*"):
        redis_client.delete(key)


def conform(
    backend: tuple[str, Keys],
    settings: Settings,
    check: Callable[[SessionStorePort, Own], Awaitable[None]],
) -> None:
    kind, keys = backend

    async def go() -> None:
        if kind == "memory":
            memory = MemorySessionStore(keys)

            async def own_memory(sid: str, epoch: int) -> None:
                memory.own(sid, epoch)

            await check(memory, own_memory)
            return
        store = SessionStore.from_url(settings.redis_url, keys)

        async def own_redis(sid: str, epoch: int) -> None:
            await store.r.hset(keys.session(sid), "epoch", epoch)  # type: ignore[misc]

        try:
            await check(store, own_redis)
        finally:
            await store.r.aclose()

    asyncio.run(go())


def test_writes_are_fenced_by_the_owners_epoch(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 2)
        await store.write("s", 2, [store.step_write("s", "a", status="running", attempt=1)])
        st = await store.step("s", "a")
        assert st is not None
        assert (st.status, st.attempt) == (StepStatus.RUNNING, 1)
        with pytest.raises(FencedOutError):
            await store.write("s", 1, [store.step_write("s", "a", status="completed")])
        assert (await store.steps("s", ["a", "b"]))["a"].status == StepStatus.RUNNING
        await store.write("s", 2, [("HSET", store.keys.session("s"), ["cancel_requested", ""])])
        assert await store.session_field("s", "cancel_requested") == ""
        plan = store.keys.plan("s", 1)
        await store.write("s", 2, [("SET", plan, ["one", "NX"])])
        await store.write("s", 2, [("SET", plan, ["two", "NX"])])
        assert await store.plan_json("s", 1) == "one"

    conform(backend, test_settings, check)


def test_end_attempt_ends_only_the_running_attempt(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        await store.ensure_groups("s")
        await store.write("s", 1, [store.step_write("s", "a", status="running", attempt=2)])
        event = Event(type=EventType.TASK_INTERRUPTED, step_id="a", attempt=1)
        assert await store.end_attempt("s", 1, "a", 1, status="interrupted", event=event) is None
        event = event.model_copy(update={"attempt": 2, "payload": {"error_kind": "lost"}})
        assert await store.end_attempt("s", 1, "a", 2, status="interrupted", event=event)
        st = await store.step("s", "a")
        assert st is not None
        assert (st.status, st.error_kind) == (StepStatus.INTERRUPTED, "lost")
        entries = await store.read_events("s", "sup", count=10, block_ms=1)
        assert [f["step_id"] for _, f in entries] == ["a"]

    conform(backend, test_settings, check)


def test_unacknowledged_events_are_taken_over_with_their_delivery_counts(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await store.ensure_groups("s")
        for step_id in ("a", "b"):
            await store.append_event("s", Event(type=EventType.TASK_COMPLETED, step_id=step_id))
        first = await store.read_events("s", "old", count=10, block_ms=1)
        assert [f["step_id"] for _, f in first] == ["a", "b"]
        assert await store.read_events("s", "new", count=10, block_ms=1) == []
        taken = await store.claim_pending("s", "new")
        assert [e for e, _ in taken] == [e for e, _ in first]
        counts = await store.delivery_counts("s", [e for e, _ in taken])
        assert counts == {e: 2 for e, _ in taken}
        await store.dead_letter("s", taken[:1], cause="test")
        assert [e for e, _ in await store.claim_pending("s", "new")] == [taken[1][0]]

    conform(backend, test_settings, check)


def test_delivery_counts_order_ids_as_numbers(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    """Ids ``…-9`` and ``…-10``: as strings the range would run backwards and find nothing."""
    keys, sid = Keys(test_settings.key_prefix), f"ids-{uuid.uuid4().hex[:6]}"
    stream = keys.events(sid)
    redis_client.xgroup_create(stream, EVENTS_GROUP, id="0", mkstream=True)
    fields: Any = Event(type=EventType.TASK_COMPLETED).to_fields()
    ids = [redis_client.xadd(stream, fields, id=f"5-{seq}") for seq in (9, 10)]
    redis_client.xreadgroup(EVENTS_GROUP, "c1", {stream: ">"}, count=10)

    async def counts() -> dict[str, int]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        try:
            return await store.delivery_counts(sid, ["5-10", "5-9"])
        finally:
            await store.r.aclose()

    try:
        assert asyncio.run(counts()) == {"5-9": 1, "5-10": 1}
        assert [i for i in ids] == ["5-9", "5-10"]
    finally:
        redis_client.delete(stream)
