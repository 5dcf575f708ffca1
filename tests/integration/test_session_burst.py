"""A burst of sessions submitted back to back on the shared stack: every one starts and
completes, each attempt once, dispatched and claimed under the epoch that owns its session
(batched starts: grouped SQL claims, fenced writes of many sessions in one pipeline, step
messages from the template)."""

from __future__ import annotations

import pytest

from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.integration.conftest import wait_ended

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
