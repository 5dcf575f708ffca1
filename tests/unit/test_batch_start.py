"""A batch of sessions taken together: which ones the batch starts itself, the ops of a
first dispatch built without a round trip (the same as dispatch_ready's), and the first
writes sent together. Without Redis (the in-memory store)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from planloop.core.models import StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.store_port import WriteOp
from planloop.supervisor.process.admission import BURST_MIN, Admission
from planloop.supervisor.process.batch_start import can_begin, first_replies, send_first_writes
from planloop.supervisor.session.sending import Scheduling
from tests.unit.loop_fixtures import EPOCH, SID, Loop, run, step

FRESH = {"status": "pending", "plan_version": "1", "goal": "g"}


def taken(epoch: int = 4, pending: int | None = 0, plan: str | None = "{}", **fields: str) -> Taken:
    return Taken("s", epoch, {**FRESH, **fields}, plan_json=plan, pending=pending)


@pytest.mark.parametrize(
    ("case", "took", "begins"),
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
def test_only_a_fresh_session_with_its_plan_and_nothing_pending_is_begun(
    case: str, took: Taken, begins: bool
) -> None:
    assert can_begin(took) is begins, case


def test_dispatch_now_builds_what_dispatch_ready_would_write() -> None:
    plan = Plan(steps=[step("a", params={"x": 1}), step("b"), step("c", "a")])
    now, later = Loop(plan), Loop(plan)
    for loop in (now, later):
        loop.io.defer_session("status", "running")
    ops = Scheduling(now.io, now.queue, on_failure=_never).dispatch_now()
    assert ops is not None
    full = now.io.take_deferred(ops)
    run(now.store.write(SID, EPOCH, full))
    run(Scheduling(later.io, later.queue, on_failure=_never).dispatch_ready())
    for step_id in ("a", "b", "c"):
        mine, theirs = now.step_hash(step_id), later.step_hash(step_id)
        assert mine.keys() == theirs.keys(), step_id
        assert mine.get("status") == theirs.get("status"), step_id
        assert mine.get("task_id") == theirs.get("task_id"), step_id
    assert now.step_hash("a")["status"] == StepStatus.RUNNING.value
    assert "c" not in now.state.inflight  # waits for a
    assert now.session_hash()["status"] == "running"  # the deferred fields went along
    assert now.state.inflight == later.state.inflight == {"a", "b"}


def test_dispatch_now_leaves_a_reference_to_dispatch_ready_and_marks_nothing() -> None:
    plan = Plan(steps=[step("a"), step("b", params={"x": "{{a.output.v}}"})])
    loop = Loop(plan, a=StepStatus.COMPLETED)
    assert Scheduling(loop.io, loop.queue, on_failure=_never).dispatch_now() is None
    assert loop.state.states["b"].status == StepStatus.PENDING
    assert not loop.state.inflight


def test_dispatch_now_leaves_a_param_sent_out_of_line_to_dispatch_ready() -> None:
    loop = Loop(Plan(steps=[step("a", params={"big": "x" * 100})]))
    loop.io.settings = loop.settings.model_copy(update={"inline_value_max_bytes": 10})
    assert Scheduling(loop.io, loop.queue, on_failure=_never).dispatch_now() is None
    assert not loop.state.inflight


def test_dispatch_now_with_nothing_ready_writes_only_the_deferred_fields() -> None:
    loop = Loop(Plan(steps=[step("a", requires_approval=True)]))
    loop.io.defer_session("status", "running")
    ops = Scheduling(loop.io, loop.queue, on_failure=_never).dispatch_now()
    assert ops == []
    assert loop.state.awaiting_approval == {"a"}  # announced by the loop
    assert [op[1] for op in loop.io.take_deferred(ops)] == [loop.store.keys.session(SID)]


def test_first_writes_leave_together_and_each_gets_its_own_reply() -> None:
    async def scenario() -> tuple[list[list[str]], list[object]]:
        rounds: list[list[str]] = []

        async def write_many(writes: Sequence[tuple[str, int, Any]]) -> list[Any]:
            rounds.append([sid for sid, _, _ in writes])
            return [RuntimeError("fenced out") if sid == "fenced" else None for sid, _, _ in writes]

        ops: list[WriteOp] = [("HSET", "k", ["a", 1])]
        replies = first_replies(3)
        await send_first_writes(write_many, [(s, 1, ops) for s in ("a", "fenced", "b")], replies)
        results = await asyncio.gather(*replies, return_exceptions=True)
        return rounds, results

    rounds, results = asyncio.run(scenario())
    assert rounds == [["a", "fenced", "b"]]  # one round trip
    assert results[0] is None
    assert results[2] is None
    assert isinstance(results[1], RuntimeError)


def test_a_failed_round_trip_reaches_every_session_of_the_chunk() -> None:
    async def scenario() -> list[object]:
        async def write_many(writes: Sequence[tuple[str, int, Any]]) -> list[Any]:
            raise ConnectionError("redis went away")

        replies = first_replies(2)
        await send_first_writes(write_many, [("a", 1, []), ("b", 1, [])], replies)
        return list(await asyncio.gather(*replies, return_exceptions=True))

    results = asyncio.run(scenario())
    assert all(isinstance(r, ConnectionError) for r in results)


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


async def _never(step_id: str) -> None:
    raise AssertionError(f"no failure expected ({step_id})")
