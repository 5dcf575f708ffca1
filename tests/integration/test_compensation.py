"""Saga compensation on `cancel` and on failure: undo completed writes in reverse completion
order, loudly."""

from __future__ import annotations

import pytest

from planloop.core.effects import SqlEffectLedger
from planloop.core.models import EventType, SessionOptions, SessionRecord, SessionStatus, StepStatus
from planloop.planner.plan import parse_plan
from planloop.supervisor.session.ending import COMPENSATE_SUFFIX
from planloop.workers.toolsets import bench, supply_chain  # noqa: F401  (registers the tools here)
from tests.conftest import wait_for
from tests.integration.conftest import (
    MakeStack,
    PrivateStack,
    RunPlan,
    report_steps,
    wait_ended,
)

pytestmark = pytest.mark.integration

# Three writes completing one after the other, then a step that holds the session open.
WRITES = """
goal: three writes, then a long wait that gets cancelled
steps:
  - {id: w1, tool: bench.write, params: {label: first}}
  - {id: w2, tool: bench.write, params: {label: second, seconds: 0.05}, dependencies: [w1]}
  - {id: w3, tool: bench.write, params: {label: third}, dependencies: [w2]}
  - {id: hold, tool: bench.sleep, params: {seconds: 12}, dependencies: [w3], timeout_s: 60}
"""

BROKEN_UNDO = """
goal: a write whose compensation cannot succeed
steps:
  - {id: ok, tool: bench.write, params: {label: fine}}
  - id: doomed
    tool: bench.write
    params: {label: doomed}
    dependencies: [ok]
    compensate:
      tool: bench.sleep
      params: {seconds: 0.01, simulate: {fail_attempts: [1, 2, 3], permanent: true}}
  - {id: hold, tool: bench.sleep, params: {seconds: 12}, dependencies: [doomed], timeout_s: 60}
"""


def cancel_when_holding(ps: PrivateStack, plan_text: str) -> tuple[str, SessionRecord]:
    """Submit, wait until the long step runs (every write done), cancel, wait for the end."""
    plan = parse_plan(plan_text)
    sid = ps.producer.submit(plan)
    wait_for(
        lambda: (
            ps.step_states(sid, ["hold"]).get("hold", None) is not None
            and ps.step_states(sid, ["hold"])["hold"].status == StepStatus.RUNNING
        ),
        60,
        "the holding step to run",
    )
    ps.producer.cancel(sid, "stop it all")
    return sid, wait_ended(ps.producer, sid, 60)


def test_cancel_undoes_completed_writes_in_reverse_completion_order(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1)

    sid, record = cancel_when_holding(ps, WRITES)

    assert record.status == SessionStatus.CANCELLED
    assert record.report is not None
    steps = report_steps(record)
    finished = sorted(("w1", "w2", "w3"), key=lambda i: steps[i]["finished_at"])
    assert finished == ["w1", "w2", "w3"]
    comps = record.report["compensations"]
    assert [c["step"] for c in comps] == ["w3", "w2", "w1"], comps
    assert all(c["status"] == "completed" and c["tool"] == "bench.undo_write" for c in comps), comps
    assert "COMPENSATION FAILED" not in (record.error or "")
    for step_id in ("w1", "w2", "w3"):
        assert ps.effects.count(f"{sid}:{step_id}") == 1
        assert ps.effects.count(f"{sid}:{step_id}:compensate:undo") == 1, step_id
    # Each compensation ran as its own attempt, recorded in Redis and in SQL, in order.
    pseudo = [f"{i}{COMPENSATE_SUFFIX}" for i in ("w3", "w2", "w1")]
    states = ps.step_states(sid, pseudo)
    ends = [states[p].finished_at for p in pseudo]
    assert all(states[p].status == StepStatus.COMPLETED for p in pseudo), states
    assert ends == sorted(ends), f"compensations did not run in reverse order: {ends}"
    wait_for(
        lambda: (row := ps.record.session(sid)) is not None and row.status == "cancelled",
        10,
        "the SQL record of the end",
    )
    recorded = [
        e.step_id
        for e in ps.record.events(sid)
        if e.type == EventType.TASK_COMPLETED.value and e.step_id in pseudo
    ]
    assert recorded == pseudo
    assert steps["hold"]["status"] == "cancelled"


def test_a_failed_compensation_is_reported_loudly(private_stack: MakeStack) -> None:
    ps = private_stack(workers=1, supervisors=1)

    sid, record = cancel_when_holding(ps, BROKEN_UNDO)

    assert record.status == SessionStatus.CANCELLED
    assert record.report is not None
    comps = {c["step"]: c for c in record.report["compensations"]}
    assert list(comps) == ["doomed", "ok"]  # reverse completion order, failure or not
    assert comps["doomed"]["status"] == "failed"
    assert comps["doomed"]["attempts"] == 1  # a permanent failure is not retried
    assert "injected failure" in comps["doomed"]["error"]
    assert comps["ok"]["status"] == "completed"
    assert ps.effects.count(f"{sid}:ok:compensate:undo") == 1
    assert "COMPENSATION FAILED for doomed" in (record.error or "")
    assert "COMPENSATION FAILED for doomed" in (record.report["error"] or "")
    wait_for(
        lambda: (row := ps.record.session(sid)) is not None and row.status == "cancelled",
        10,
        "the SQL record of the end",
    )
    row = ps.record.session(sid)
    assert row is not None
    assert "COMPENSATION FAILED for doomed" in row.error


RESERVE = """
goal: reserve stock, then get cancelled
steps:
  - {id: reserve, tool: supply_chain.reserve_stock, params: {sku: SKU12345, qty: 5}}
  - {id: hold, tool: bench.sleep, params: {seconds: 12}, dependencies: [reserve], timeout_s: 60}
"""


def test_cancel_releases_a_stock_reservation_with_its_default_compensation(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1)

    _sid, record = cancel_when_holding(ps, RESERVE)

    assert record.status == SessionStatus.CANCELLED
    assert record.report is not None
    comps = record.report["compensations"]
    assert [(c["step"], c["tool"]) for c in comps] == [
        ("reserve", "supply_chain.cancel_reservation")
    ]
    assert comps[0]["status"] == "completed", comps[0]["error"]
    assert "COMPENSATION FAILED" not in (record.error or "")


# A write completes, then a critical step fails for good: the rule policy fails the session.
WRITE_THEN_CRITICAL_FAILURE = """
goal: a write, then a critical step that cannot succeed
steps:
  - {id: w, tool: bench.write, params: {label: kept-or-undone}}
  - id: vital
    tool: bench.sleep
    critical: true
    params: {seconds: 0.01, simulate: {fail_attempts: [1, 2, 3], permanent: true}}
    dependencies: [w]
"""


def test_a_failed_session_undoes_its_completed_writes(
    run_plan: RunPlan, effects: SqlEffectLedger
) -> None:
    sid, record = run_plan(WRITE_THEN_CRITICAL_FAILURE)

    assert record.status == SessionStatus.FAILED, record.error
    assert record.report is not None
    comps = record.report["compensations"]
    assert [(c["step"], c["tool"], c["status"]) for c in comps] == [
        ("w", "bench.undo_write", "completed")
    ], comps
    assert effects.count(f"{sid}:w") == 1
    assert effects.count(f"{sid}:w:compensate:undo") == 1  # once, not per attempt
    assert report_steps(record)["vital"]["status"] == "failed"


def test_compensate_on_failure_false_keeps_the_writes_of_a_failed_session(
    run_plan: RunPlan, effects: SqlEffectLedger
) -> None:
    sid, record = run_plan(WRITE_THEN_CRITICAL_FAILURE, SessionOptions(compensate_on_failure=False))

    assert record.status == SessionStatus.FAILED, record.error
    assert record.report is not None
    assert record.report["compensations"] == []
    assert effects.count(f"{sid}:w") == 1
    assert effects.count(f"{sid}:w:compensate:undo") == 0


WRITE_THEN_LONG_WAIT = """
goal: a write, then a wait longer than the session's deadline
steps:
  - {id: w, tool: bench.write, params: {label: undone-at-the-deadline}}
  - {id: hold, tool: bench.sleep, params: {seconds: 6}, dependencies: [w], timeout_s: 60}
"""


def test_a_session_past_its_deadline_undoes_its_completed_writes(
    run_plan: RunPlan, effects: SqlEffectLedger
) -> None:
    sid, record = run_plan(WRITE_THEN_LONG_WAIT, SessionOptions(deadline_s=2.0))

    assert record.status == SessionStatus.FAILED, record.error
    assert "deadline" in (record.error or "")
    assert record.report is not None
    comps = record.report["compensations"]
    assert [(c["step"], c["status"]) for c in comps] == [("w", "completed")], comps
    assert effects.count(f"{sid}:w:compensate:undo") == 1
    assert report_steps(record)["hold"]["status"] == "cancelled"
