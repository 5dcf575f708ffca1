"""One conformance suite for the session loop's store port: the Redis store and its in-memory
twin answer the same calls the same way (so the loop's unit tests on the twin hold on Redis).

Each method of ``SessionStorePort`` has its spec here, run against both backends; what the
port cannot read back (the active set) is looked at through :func:`members`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
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


async def members(store: SessionStorePort, key: str) -> set[str]:
    """A set as the backend holds it (the port writes sets but never reads them)."""
    if isinstance(store, MemorySessionStore):
        return set(store.sets.get(key, set()))
    assert isinstance(store, SessionStore)
    return set(await store.r.smembers(key))  # type: ignore[misc]


def completed(step_id: str) -> Event:
    return Event(type=EventType.TASK_COMPLETED, step_id=step_id)


def test_session_reads_the_record_or_none(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        assert await store.session("s") is None
        await own("s", 1)
        await store.write("s", 1, [("HSET", store.keys.session("s"), ["goal", "g", "replans", 2])])
        record = await store.session("s")
        assert record is not None
        assert (record.id, record.goal, record.replans) == ("s", "g", 2)

    conform(backend, test_settings, check)


def test_session_fields_are_the_hash_as_text(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        assert await store.session_fields("s") == {}
        await own("s", 3)
        await store.write("s", 3, [("HSET", store.keys.session("s"), ["status", "running"])])
        assert await store.session_fields("s") == {"epoch": "3", "status": "running"}
        assert await store.session_field("s", "missing") is None

    conform(backend, test_settings, check)


def test_steps_fill_in_a_pending_step_for_a_missing_hash(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        await store.write("s", 1, [store.step_write("s", "a", status="completed", attempt=1)])
        states = await store.steps("s", ["a", "b"])
        assert list(states) == ["a", "b"]
        assert (states["a"].status, states["a"].attempt) == (StepStatus.COMPLETED, 1)
        assert (states["b"].status, states["b"].attempt) == (StepStatus.PENDING, 0)
        assert await store.step("s", "b") is None  # one step asked for: absent is None

    conform(backend, test_settings, check)


def test_outputs_and_blobs_read_stored_values_or_none(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        await store.write("s", 1, [("SET", store.keys.blob("d1"), ['{"n": 1}'])])
        assert await store.outputs(["d1", "gone"]) == [{"n": 1}, None]
        assert await store.blobs(["d1", "gone"], ttl_s=60) == ['{"n": 1}', None]
        assert await store.blobs([]) == []

    conform(backend, test_settings, check)


def test_keep_blobs_writes_back_only_what_is_gone(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        await store.write("s", 1, [("SET", store.keys.blob("kept"), ['"old"'])])
        await store.keep_blobs({"kept": lambda: '"new"', "gone": lambda: '"back"'}, ttl_s=60)
        assert await store.blobs(["kept", "gone"]) == ['"old"', '"back"']

    conform(backend, test_settings, check)


def test_queued_and_queue_length_read_the_task_queue(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        queue = f"{store.keys.prefix}:q"
        assert await store.queue_length(queue) == 0
        messages = ['{"headers": {"id": "t1"}}', '{"headers": {"id": "t2"}}']
        await store.write("s", 1, [("LPUSH", queue, messages)])
        assert await store.queue_length(queue) == 2
        assert await store.queued(queue, "t2")
        assert not await store.queued(queue, "t3")

    conform(backend, test_settings, check)


def test_note_progress_encodes_values_as_text_and_last_note_finds_the_newest(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        assert await store.last_note("s", ["round"]) is None
        await store.note_progress("s", "round", round=1)
        await store.note_progress("s", "round", round=2, ok=True, data={"x": 1}, wait_s=0.5)
        await store.note_progress("s", "ended", status="failed")
        note = await store.last_note("s", ["round", "replan"])
        assert note is not None
        note.pop("at", None)  # when: the Redis store's own field
        assert note == {
            "kind": "round",
            "round": "2",
            "ok": "True",
            "data": '{"x":1}',  # compact JSON, as every stored value
            "wait_s": "0.5",
        }

    conform(backend, test_settings, check)


def test_a_progress_op_is_noted_with_its_fenced_write_and_refused_with_it(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        status = ("HSET", store.keys.session("s"), ["status", "completed"])
        with pytest.raises(FencedOutError):  # a stale epoch notes nothing
            await store.write("s", 2, [store.progress_op("s", "ended", status="failed")])
        assert await store.last_note("s", ["ended"]) is None
        await store.write("s", 1, [status, store.progress_op("s", "ended", status="completed")])
        note = await store.last_note("s", ["ended"])
        assert note is not None
        note.pop("at", None)
        assert note == {"kind": "ended", "status": "completed"}
        assert (await store.session_fields("s"))["status"] == "completed"

    conform(backend, test_settings, check)


def test_leave_active_takes_the_session_off_the_active_set(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await own("s", 1)
        await store.write("s", 1, [("SADD", store.keys.active, ["s", "t"])])
        await store.leave_active("s")
        assert await members(store, store.keys.active) == {"t"}

    conform(backend, test_settings, check)


def test_append_event_and_read_events_deliver_each_entry_once(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await store.ensure_groups("s")
        await store.ensure_groups("s")  # a second time: the group is there already
        entry = await store.append_event("s", completed("a"))
        first = await store.read_events("s", "sup", count=10, block_ms=1)
        assert [(e, f["step_id"]) for e, f in first] == [(entry, "a")]
        assert await store.read_events("s", "sup", count=10, block_ms=1) == []

    conform(backend, test_settings, check)


def test_ack_many_acknowledges_the_events_of_several_sessions(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        read: dict[str, list[str]] = {}
        for sid in ("s", "t"):
            await store.ensure_groups(sid)
            await store.append_event(sid, completed("a"))
            read[sid] = [e for e, _ in await store.read_events(sid, "c", count=10, block_ms=1)]
        await store.ack_many([("s", read["s"]), ("t", []), ("t", read["t"][:0])])
        assert await store.claim_pending("s", "c") == []
        assert [e for e, _ in await store.claim_pending("t", "c")] == read["t"]

    conform(backend, test_settings, check)


def test_trim_events_keeps_the_newest_and_every_pending_entry(
    backend: tuple[str, Keys], test_settings: Settings
) -> None:
    async def check(store: SessionStorePort, own: Own) -> None:
        await store.ensure_groups("s")
        assert await store.trim_events("s", keep=10) == 0
        for step_id in "abcde":
            await store.append_event("s", completed(step_id))
        entries = [e for e, _ in await store.read_events("s", "c", count=10, block_ms=1)]
        await store.ack_many([("s", entries[:3])])
        assert await store.trim_events("s", keep=1) == 3  # d is pending: the cut stops there
        assert [e for e, _ in await store.claim_pending("s", "c")] == entries[3:]

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


def test_every_port_method_has_a_spec_here() -> None:
    """A method added to the port without a spec in this module fails here."""
    source = Path(__file__).read_text("utf-8")
    methods = [name for name in vars(SessionStorePort) if not name.startswith("_")]
    untested = [m for m in methods if callable(getattr(SessionStorePort, m, None))]
    untested = [m for m in untested if f"store.{m}(" not in source]
    assert len(methods) > 20
    assert not untested, f"store port methods without a conformance spec: {untested}"
