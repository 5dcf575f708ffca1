"""Failure handling by rule on the real stack: skipped branches, failed sessions, retries."""

from __future__ import annotations

import json
from typing import cast

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.keys import Keys
from planloop.core.models import EventType, SessionOptions, SessionStatus
from planloop.core.tools import REGISTRY, ToolContext
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import RunPlan, report_steps, wait_ended

pytestmark = pytest.mark.integration


def test_non_critical_failure_skips_its_branch_and_the_session_completes(
    run_plan: RunPlan, hot_state: HotState
) -> None:
    plan = """
goal: a non-critical branch fails
steps:
  - id: broken
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1, 2, 3], permanent: true}}
  - {id: after, tool: bench.echo, params: {value: 1}, dependencies: [broken]}
  - {id: later, tool: bench.echo, params: {value: 2}, dependencies: [after]}
  - {id: other, tool: bench.sleep, params: {seconds: 0.05}}
  - {id: other2, tool: bench.echo, params: {value: "{{other.output.slept}}"}, dependencies: [other]}
"""
    sid, record = run_plan(plan)

    assert record.status == SessionStatus.COMPLETED
    steps = report_steps(record)
    assert steps["broken"]["status"] == "failed"
    assert steps["broken"]["attempts"] == 1  # permanent: retrying cannot help
    assert "injected failure" in steps["broken"]["error"]
    for skipped in ("after", "later"):
        assert steps[skipped]["status"] == "skipped"
        assert steps[skipped]["attempts"] == 0
        assert steps[skipped]["started_at"] is None
    assert steps["other"]["status"] == "completed"
    assert steps["other2"]["output"] == {"value": 0.05}
    assert record.report is not None
    assert "broken" in (record.report["error"] or "")
    types = [e.type for _, e in hot_state.events(sid)]
    assert EventType.TASK_FAILED in types
    assert EventType.DEPENDENCY_BROKEN in types


def test_critical_failure_fails_the_session_and_says_why(run_plan: RunPlan) -> None:
    plan = """
goal: a critical step fails
steps:
  - id: vital
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    critical: true
  - {id: next, tool: bench.echo, params: {value: 1}, dependencies: [vital]}
  - {id: last, tool: bench.echo, params: {value: 2}, dependencies: [next]}
  - {id: side, tool: bench.sleep, params: {seconds: 1.0}}
"""
    _sid, record = run_plan(plan)

    assert record.status == SessionStatus.FAILED
    assert record.report is not None
    error = record.report["error"] or ""
    assert "vital" in error
    assert "injected failure" in error
    assert record.error == error
    steps = report_steps(record)
    assert steps["vital"]["status"] == "failed"
    for pending in ("next", "last"):
        assert steps[pending]["status"] in ("skipped", "cancelled")
        assert steps[pending]["attempts"] == 0
        assert steps[pending]["started_at"] is None
    # The independent step was still running when the session failed: it was cut short.
    assert steps["side"]["status"] == "cancelled"


def test_step_timeout_is_retried_then_reported(run_plan: RunPlan) -> None:
    plan = """
goal: a step that always runs past its timeout
steps:
  - {id: stuck, tool: bench.sleep, params: {seconds: 5}, timeout_s: 0.5, max_retries: 1}
  - {id: fine, tool: bench.echo, params: {value: ok}}
"""
    _sid, record = run_plan(plan)

    assert record.status == SessionStatus.COMPLETED
    steps = report_steps(record)
    stuck = steps["stuck"]
    assert stuck["status"] in ("interrupted", "failed")
    assert stuck["attempts"] == 2
    assert "timeout" in stuck["error"]
    assert steps["fine"]["status"] == "completed"


def test_retry_succeeds_on_attempt_2_with_exactly_one_effect(
    run_plan: RunPlan,
    effects: SqlEffectLedger,
    redis_client: redis.Redis,
    test_settings: Settings,
) -> None:
    plan = """
goal: a write that fails once
steps:
  - id: pay
    tool: bench.write
    params: {label: payment, simulate: {fail_attempts: [1]}}
    max_retries: 2
"""
    sid, record = run_plan(plan)

    assert record.status == SessionStatus.COMPLETED, record.error
    pay = report_steps(record)["pay"]
    assert pay["status"] == "completed"
    assert pay["attempts"] == 2
    key = f"{sid}:pay"
    assert effects.count(key) == 1
    stored = cast(str, redis_client.hget(Keys(test_settings.key_prefix).effects, key))
    assert pay["output"] == json.loads(stored)
    assert pay["output"]["idempotency_key"] == key


def test_a_second_attempt_of_a_write_returns_the_first_receipt(
    effects: SqlEffectLedger, run_id: str
) -> None:
    """The worker's tool path twice under one idempotency key: one effect, one receipt."""
    spec = REGISTRY.get("bench.write")
    key = f"{run_id}-direct:write"
    receipts = [
        spec.run(
            {"label": "twice"},
            ToolContext(
                session_id=f"{run_id}-direct",
                step_id="write",
                attempt=attempt,
                idempotency_key=key,
                effects=effects,
            ),
        )
        for attempt in (1, 2)
    ]

    assert receipts[0] == receipts[1]
    assert effects.count(key) == 1


def test_a_session_past_its_deadline_ends_with_its_partial_results(run_plan: RunPlan) -> None:
    plan = """
goal: one quick step, one that would take far too long
steps:
  - {id: quick, tool: bench.echo, params: {value: 7}}
  - {id: slow, tool: bench.sleep, params: {seconds: 20}, dependencies: [quick]}
  - {id: never, tool: bench.echo, params: {value: 8}, dependencies: [slow]}
"""
    _sid, record = run_plan(plan, SessionOptions(deadline_s=1.0), timeout_s=15)

    assert record.status == SessionStatus.FAILED
    assert "deadline of 1s passed" in record.error
    steps = report_steps(record)
    assert steps["quick"]["status"] == "completed"
    assert steps["quick"]["output"] == {"value": 7}  # the partial result is kept
    assert steps["slow"]["status"] == "cancelled"  # cut short, not left running
    assert steps["never"]["status"] in ("cancelled", "skipped")
    assert steps["never"]["attempts"] == 0


def test_a_step_that_requires_approval_waits_for_a_person(
    stack: Stack, producer: Producer, hot_state: HotState
) -> None:
    plan = parse_plan(
        """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a], requires_approval: true}
  - {id: c, tool: bench.echo, params: {value: 3}, dependencies: [b]}
"""
    )
    sid = producer.submit(plan)

    def asked() -> bool:
        return any(n.get("kind") == "approval_required" for _, n in hot_state.progress(sid))

    wait_for(asked, 20, "the approval request")
    b = hot_state.steps(sid, ["b"])["b"]
    assert (b.status.value, b.attempt, b.note) == ("pending", 0, "awaiting approval")
    assert not producer.session(sid).status.ended

    producer.approve(sid, step="b", note="looks fine")
    record = wait_ended(producer, sid, 20)
    assert record.status == SessionStatus.COMPLETED
    assert {s["id"]: s["status"] for s in report_steps(record).values()} == {
        "a": "completed",
        "b": "completed",
        "c": "completed",
    }
