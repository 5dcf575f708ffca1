"""Re-planning without an LLM: the rule policy injects declared fallbacks, or fails the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.models import EventType, SessionRecord, SessionStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan, load_plan, parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.integration.conftest import report_steps, wait_ended
from tests.integration.llm_conftest import wait_recorded

pytestmark = pytest.mark.integration

SUPPLY_CHAIN = Path(__file__).resolve().parents[2] / "examples" / "supply_chain.yaml"
FALLBACK = ("alternative_suppliers", "order_alternative", "approve_order")


def run(producer: Producer, record: SqlRecord, plan: Plan) -> tuple[str, SessionRecord]:
    sid = producer.submit(plan)
    wait_ended(producer, sid)
    return sid, wait_recorded(producer, record, sid)


def test_supply_chain_switches_to_the_alternative_supplier_by_rule(
    stack: Stack,
    producer: Producer,
    record: SqlRecord,
    hot_state: HotState,
    effects: SqlEffectLedger,
) -> None:
    sid, session = run(producer, record, load_plan(SUPPLY_CHAIN))

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.plan_version == 2
    assert session.replans == 1
    steps = report_steps(session)
    assert steps["verify_primary"]["status"] == "failed"
    assert steps["verify_primary"]["attempts"] == 1
    assert "cannot supply" in steps["verify_primary"]["error"]
    for step_id in (*FALLBACK, "erp_stock", "reserve_stock"):
        assert steps[step_id]["status"] == "completed", step_id
        assert steps[step_id]["attempts"] == 1, step_id
    offers = steps["alternative_suppliers"]["output"]["suppliers"]
    order = steps["order_alternative"]["output"]
    assert order["supplier_id"] == offers[0]["supplier_id"] != "primary"
    assert order["qty"] == steps["erp_stock"]["output"]["shortfall"]
    assert steps["approve_order"]["output"]["amount"] == order["total"]
    assert steps["approve_order"]["output"]["approved"] is True
    # the step that depended on the failed one ran after the fallback took over
    assert steps["reserve_stock"]["started_at"] >= steps["approve_order"]["finished_at"]
    assert effects.count(f"{sid}:order_alternative") == 1
    assert effects.count(f"{sid}:reserve_stock") == 1

    (decision,) = record.decisions(sid)
    assert (decision.action, decision.source) == ("REPLAN_REMAINING", "rule")
    assert "verify_primary failed for good; inject its fallback" in decision.reasoning
    assert list(record.llm_calls(sid)) == []
    v2 = Plan.model_validate_json(record.plan_versions(sid)[-1].plan)
    assert v2.by_id["reserve_stock"].dependencies == ["erp_stock", "approve_order"]
    assert v2.by_id["verify_primary"].fallback == []
    replans = [f for _, f in hot_state.progress(sid) if f.get("kind") == "replan_required"]
    assert [(n["count"], n["action"]) for n in replans] == [("1", "REPLAN_REMAINING")]


def test_a_critical_failure_without_fallback_fails_the_session_by_rule(
    stack: Stack, producer: Producer, record: SqlRecord, hot_state: HotState
) -> None:
    plan = parse_plan(
        """
goal: a critical step with nowhere to fall back to
steps:
  - {id: first, tool: bench.echo, params: {value: 1}}
  - id: vital
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    dependencies: [first]
    critical: true
  - {id: next, tool: bench.echo, params: {value: 2}, dependencies: [vital]}
"""
    )
    sid, session = run(producer, record, plan)

    assert session.status == SessionStatus.FAILED  # failed, not aborted: nobody gave up
    assert session.plan_version == 1
    assert session.replans == 0
    (decision,) = record.decisions(sid)
    assert (decision.action, decision.source) == ("ABORT", "rule")
    assert decision.reasoning.startswith("rule policy (no LLM configured): critical step vital")
    assert "injected failure" in decision.reasoning
    assert session.error == decision.reasoning
    assert report_steps(session)["next"]["attempts"] == 0
    types = [e.type for _, e in hot_state.events(sid)]
    assert EventType.TASK_FAILED in types
