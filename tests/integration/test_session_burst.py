"""A burst of sessions submitted back to back on the shared stack: every one starts and
completes, each attempt once, dispatched and claimed under the epoch that owns its session
(batched starts: grouped SQL claims, fenced writes of many sessions in one pipeline, step
messages from the template)."""

from __future__ import annotations

import json
import uuid

import pytest

from planloop.core.hot_state import PLAN_CHECKED_FIELD, blob_digest
from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.integration.conftest import MakeStack, wait_ended

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

SESSIONS, STEPS = 120, 3


def test_a_burst_of_sessions_all_start_and_complete_fenced(
    stack: Stack, producer: Producer
) -> None:
    plans = [
        Plan(
            goal=f"burst {i}",
            steps=[
                Step(id=f"s{j}", tool="bench.echo", params={"value": {"session": i, "step": j}})
                for j in range(STEPS)
            ],
        )
        for i in range(SESSIONS)
    ]
    sids = [producer.submit(plan) for plan in plans]
    step_ids = [f"s{j}" for j in range(STEPS)]
    for i, sid in enumerate(sids):
        record = wait_ended(producer, sid, timeout_s=180)
        assert record.status == SessionStatus.COMPLETED, record.error
        states = producer.state.steps(sid, step_ids)
        assert set(states) == set(step_ids)
        for step_id, st in states.items():
            assert st.status.value == "completed"
            assert st.attempt == 1  # started once: no lost or duplicated dispatch
            assert st.epoch == record.epoch  # dispatched by the epoch that owns it
            assert st.task_id == f"{sid}:{step_id}:1"
        assert record.report is not None
        outputs = {s["id"]: s["output"] for s in record.report["steps"]}
        assert outputs == {f"s{j}": {"value": {"session": i, "step": j}} for j in range(STEPS)}


def test_a_batch_validates_a_stored_plan_not_marked_checked(private_stack: MakeStack) -> None:
    """Sessions taken in one batch: those the producer validated start from their marked
    plans; a plan stored past the producer (no mark, or a mark made for another text) is
    validated when the batch reads it, and its session fails on the limit it breaks."""
    ps = private_stack(  # no supervisor yet: all of them on the inbox, taken in one batch
        supervisors=0,
        max_session_crashes=2,
        session_crash_cool_off_s=0.2,
        session_crash_cool_off_max_s=0.5,
    )
    good = [
        ps.producer.submit(
            Plan(goal=f"g{i}", steps=[Step(id="a", tool="bench.echo", params={"value": i})])
        )
        for i in range(20)
    ]
    bad_plan = json.dumps(
        {"goal": "bad", "steps": [{"id": "a", "tool": "bench.echo", "title": "be\u0007ll"}]}
    )
    unmarked, forged = f"raw-{uuid.uuid4().hex[:8]}", f"raw-{uuid.uuid4().hex[:8]}"
    for sid in (unmarked, forged):
        ps.hot.create_session(sid, plan_json=bad_plan, goal="bad", options=SessionOptions())
    ps.redis.hset(ps.keys.session(forged), PLAN_CHECKED_FIELD, blob_digest("another text"))
    assert ps.redis.hget(ps.keys.session(good[0]), PLAN_CHECKED_FIELD)  # marked at submit
    ps.start_supervisor()
    for sid in good:
        assert wait_ended(ps.producer, sid, 60).status == SessionStatus.COMPLETED
    for sid in (unmarked, forged):
        record = wait_ended(ps.producer, sid, 60)
        assert record.status == SessionStatus.FAILED
        # the supervisor's own input check names the limit the stored plan breaks
        assert "control character" in record.error, record.error
