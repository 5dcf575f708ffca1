"""A batch of sessions taken together: which ones start from what the batch read, what the
start returns (the state and the ops of the first write, nothing dispatched), and the loop's
first turn sending those ops with the first dispatch in one fenced write. Without Redis (the
in-memory store)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planloop.config.settings import Settings
from planloop.core.models import SessionStatus, StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.process.admission import BURST_MIN, Admission
from planloop.supervisor.process.batch_start import starts_from_batch
from planloop.supervisor.session.loop import SessionRunner
from tests.unit.loop_fixtures import EPOCH, SID, context, step

FRESH = {"status": "pending", "plan_version": "1", "goal": "g"}


def taken(epoch: int = 4, pending: int | None = 0, plan: str | None = "{}", **fields: str) -> Taken:
    return Taken("s", epoch, {**FRESH, **fields}, plan_json=plan, pending=pending)


@pytest.mark.parametrize(
    ("case", "took", "from_batch"),
    [
        ("fresh, with its plan", taken(), True),
        ("lease not taken", taken(epoch=0), False),
        ("no hot state", Taken("s", 4, {}, plan_json="{}", pending=0), False),
        ("no plan yet: planned by its loop", taken(plan_version="0", plan=None), False),
        ("plan not read", taken(plan=None), False),
        ("owned before: a takeover", taken(started_at="12.5"), False),
        ("cancel asked for", taken(cancel_requested="stop"), False),
        ("cancel asked for, no reason", taken(cancel_requested=""), False),
        ("events pending", taken(pending=2), False),
        ("pending not counted", taken(pending=None), False),
        ("ended", taken(status="completed"), False),
        ("a streamed plan, mid-way", taken(planning="streaming"), False),
    ],
)
def test_only_a_fresh_session_with_its_plan_and_nothing_pending_starts_from_its_batch(
    case: str, took: Taken, from_batch: bool
) -> None:
    assert starts_from_batch(took) is from_batch, case


PLAN = Plan(goal="g", steps=[step("a"), step("b"), step("c", "a")])


class Started:
    """One session's loop started from what its batch read, its fenced writes counted."""

    def __init__(self, **fields: str) -> None:
        self.store = store = MemorySessionStore()
        store.own(SID, EPOCH, **FRESH, **fields)
        self.writes: list[list[Any]] = []
        inner = store.write

        async def write(sid: str, epoch: int, ops: Any) -> None:
            self.writes.append(list(ops))
            await inner(sid, epoch, ops)

        store.write = write  # type: ignore[method-assign]
        self.ctx = context(Settings(), store)
        fields = dict(store.hashes[store.keys.session(SID)])
        took = Taken(SID, EPOCH, fields, plan_json=PLAN.model_dump_json(), pending=0)
        self.runner = SessionRunner(self.ctx, SID, EPOCH, took)


def test_the_start_returns_the_state_and_running_and_the_first_turn_sends_them_together() -> None:
    started = Started()
    runner, store = started.runner, started.store

    async def scenario() -> None:
        try:
            first = await runner.start.read()
            assert first.state.info.status == SessionStatus.RUNNING
            assert [op[1] for op in first.ops] == [store.keys.session(SID)]  # running
            runner.wire(first.state)
            runner.io.carry(first.ops)
            await runner.start.catch_up(first.state, runner.catch_up)
            assert started.writes == []  # nothing written, nothing dispatched yet
            assert not first.state.inflight
            assert await runner._send()
        finally:
            await runner.start.close()
            await runner.checkpointer.close()

    asyncio.run(scenario())
    assert len(started.writes) == 1  # one fenced write: running and the ready steps
    assert started.writes[0][0][1] == store.keys.session(SID)
    hashes = store.hashes
    assert hashes[store.keys.session(SID)]["status"] == "running"
    assert hashes[store.keys.step(SID, "a")]["status"] == StepStatus.RUNNING.value
    assert runner.state.inflight == {"a", "b"}
    assert len(store.lists["q"]) == 2


def test_a_session_started_from_its_batch_holds_no_start_slot() -> None:
    runner = Started().runner

    async def scenario() -> int:
        try:
            await runner.begin()
            return runner.ctx.admission.starting
        finally:
            await runner.start.close()

    assert asyncio.run(scenario()) == 0  # the batch's starting_batch covers it


def test_a_session_read_by_its_loop_holds_a_start_slot_until_its_first_dispatch() -> None:
    started = Started()
    runner = started.runner
    assert runner.start.taken is not None
    runner.start.taken.pending = None  # not counted by its batch: its loop looks itself

    async def scenario() -> tuple[int, int]:
        try:
            await runner.begin()
            starting = runner.ctx.admission.starting
            await runner._send()
            return starting, runner.ctx.admission.starting
        finally:
            await runner.start.close()
            await runner.checkpointer.close()

    assert asyncio.run(scenario()) == (1, 0)
    assert started.store.hashes[started.store.keys.session(SID)]["status"] == "running"


def test_a_batch_starting_takes_no_slot_and_holds_older_loops_in_a_burst_only() -> None:
    async def scenario() -> list[str]:
        admission = Admission(slots=1, max_defer_s=3600)
        order: list[str] = []

        async def old(name: str) -> None:
            await admission.defer()
            order.append(name)

        with admission.starting_batch():
            assert admission.starting == 1
            async with admission.start():  # the batch holds no slot: a start gets it
                order.append("start")
            await old("old, beside a small batch")  # a few sessions starting hold nobody
            admission.intake(BURST_MIN, now=0.0)  # the batch is part of a burst
            waiting = asyncio.create_task(old("old, after the burst"))
            await asyncio.sleep(0)
            assert not waiting.done()
            admission.intake(0, now=0.1)
        await waiting
        assert admission.starting == 0
        return order

    assert asyncio.run(scenario()) == [
        "start",
        "old, beside a small batch",
        "old, after the burst",
    ]
