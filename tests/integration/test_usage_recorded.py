"""Every model call a session causes is recorded against it: what
``planloop show SID --json`` totals equals what the endpoint reported in ``usage``.

Real Redis, workers and supervisors from the installed wheel, the scripted server (which
counts the usage it reports, :meth:`ScriptedLLMServer.served_usage`; it is reset per test,
so what it served is the one session's spend).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping

import pytest
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.core.lessons import LessonStore
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, wait_ended
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_planning_loop import decision, echo
from tests.integration.test_react_steps import answer, turn
from tests.llm_server import ScriptedLLMServer
from tests.shipped import shipped

pytestmark = pytest.mark.integration

CYCLE = {
    "steps": [
        {"id": "a", "tool": "bench.echo", "params": {"value": 1}, "dependencies": ["b"]},
        {"id": "b", "tool": "bench.echo", "params": {"value": 2}, "dependencies": ["a"]},
    ]
}


def cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``planloop ARGS`` as a user runs it (the shipped wheel, outside the checkout)."""
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**os.environ, **env}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def shown_totals(settings: Settings, sid: str) -> dict[str, int]:
    """The ``llm`` totals of ``planloop show SID --json``."""
    result = cli("show", sid, "--json", env=settings.to_env())
    assert result.returncode == 0, result.stderr
    totals: dict[str, int] = json.loads(result.stdout)["llm"]
    return totals


def wait_totals_equal(
    llm: ScriptedLLMServer, settings: Settings, sid: str, timeout_s: float = 30
) -> dict[str, int]:
    """Wait (with a deadline) until ``show --json`` totals equal what the server served:
    calls after the end (the reflector, a lesson's embedding) may still be on their way."""

    def equal() -> dict[str, int] | None:
        shown, served = shown_totals(settings, sid), llm.served_usage()
        return shown if shown == served and served["calls"] > 0 else None

    try:
        return wait_for(equal, timeout_s, "show --json totals to equal what the server served")
    except (AssertionError, pytest.fail.Exception):
        shown, served = shown_totals(settings, sid), llm.served_usage()
        raise AssertionError(f"show --json llm {shown} != served {served}") from None


def test_a_plan_error_then_its_repair_are_both_recorded(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_settings: Settings
) -> None:
    llm.script("planner", CYCLE, {"goal": "echo", "steps": [echo("ok", "fine")]})

    sid = llm_producer.submit_goal(
        "echo fine", tools=["bench"], options=SessionOptions(mode="plan")
    )
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert len(llm.requests_for("planner")) == 2  # the cycle, then the repaired plan
    totals = wait_totals_equal(llm, llm_settings, sid)
    roles = [c.role for c in llm_record.llm_calls(sid)]
    assert roles.count("planner") == 2
    assert totals["calls"] == len(roles)


def test_a_react_fallback_records_the_failed_plans_and_every_turn_on_the_worker(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_settings: Settings
) -> None:
    llm.script("planner", CYCLE, CYCLE, CYCLE)  # planning fails after its repairs
    # On the worker: an unusable turn (repaired), a tool call, the answer.
    llm.script("react", "not json at all", turn("bench.echo", value="x"), answer(result="x"))

    sid = llm_producer.submit_goal("echo x", tools=["bench"], options=SessionOptions(mode="plan"))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert len(llm.requests_for("planner")) == 3
    assert len(llm.requests_for("react")) == 3
    wait_totals_equal(llm, llm_settings, sid)
    calls = llm_record.llm_calls(sid)
    assert [c.role for c in calls].count("planner") == 3  # the failed attempts too
    react = [c for c in calls if c.role == "react"]
    assert len(react) == 3  # the unusable turn too, charged by the worker
    assert {(c.step_id, c.attempt) for c in react} == {("agent", 1)}
    # the session hash's running totals (the budget's view) count them all
    recorded = sum(c.prompt_tokens + c.completion_tokens for c in calls)
    hashed = sum(p + c for p, c in llm_producer.session(sid).llm_usage.values())
    assert hashed == recorded


def test_a_reflection_and_its_lesson_are_recorded_after_the_end(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    lessons: LessonStore,
) -> None:
    goal = "Verify the primary supplier of SKU-3 in category garden"
    verify = {
        "id": "verify",
        "tool": "supply_chain.verify_supplier",
        "params": {
            "sku": "SKU-3",
            "supplier_id": "primary",
            "simulate": {"fail_attempts": [1], "permanent": True},
        },
        "max_retries": 0,
        "critical": True,
    }
    llm.script("planner", {"goal": goal, "steps": [verify]})
    llm.script("decider", decision("ABORT", "the primary supplier cannot deliver"))
    lesson = {
        "trigger": "verify_supplier failed on the primary supplier",
        "lesson": "Check an alternative supplier for garden SKUs in parallel.",
        "applies_to": {"toolsets": ["supply_chain"], "tools": ["supply_chain.verify_supplier"]},
        "evidence": "the verify step failed for good",
    }
    llm.script("reflector", {"lessons": [lesson]})

    sid = llm_producer.submit_goal(goal, options=SessionOptions(mode="plan"))
    session = wait_recorded(llm_producer, llm_record, sid)
    assert session.status in (SessionStatus.ABORTED, SessionStatus.FAILED), session.error
    wait_for(lessons.all, 30, "the reflector's lesson")

    wait_totals_equal(llm, llm_settings, sid)
    roles = [c.role for c in llm_record.llm_calls(sid)]
    assert "reflector" in roles  # made after the end, recorded all the same
    if llm_settings.llm_embedding_model:  # the goal's search and the lesson's embedding
        assert "embedding" in roles


TWO_DECISIONS = """
goal: two failures, one before and one after a takeover
steps:
  - {id: f1, tool: bench.sleep, params: {seconds: 0.01, simulate: {fail_attempts: [1],
      permanent: true}}, max_retries: 0, critical: true}
  - {id: hold, tool: bench.sleep, params: {seconds: 4}, timeout_s: 30}
  - {id: f2, tool: bench.sleep, params: {seconds: 0.01, simulate: {fail_attempts: [1],
      permanent: true}}, dependencies: [hold], max_retries: 0, critical: true}
"""


def test_a_supervisor_killed_right_after_a_call_loses_none_of_it(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = private_stack(llm_base_url=llm.base_url, llm_api_key=SecretStr("test"), llm_max_retries=0)
    go_on = decision("CONTINUE", "go on")
    llm.script("decider", go_on, go_on)
    sid = ps.producer.submit(parse_plan(TWO_DECISIONS), SessionOptions(max_tokens=10**6))

    # Killed the moment the first decision's call is in the ledger: before the loop can
    # act on it, checkpoint it or count it in the session hash.
    wait_for(lambda: ps.record.llm_calls(sid), 30, "the first decider call in the ledger")
    victim = ps.owner_process(sid)
    assert victim is not None, "the session has no live owner"
    ps.signal(victim, signal.SIGKILL)
    ps.start_supervisor()
    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.COMPLETED, record.error
    wait_totals_equal(llm, ps.settings, sid)
    calls = ps.record.llm_calls(sid)
    recorded = sum(c.prompt_tokens + c.completion_tokens for c in calls)
    # the new owner's running totals start from what the ledger recorded
    assert sum(p + c for p, c in record.llm_usage.values()) == recorded


def calls_started_past(record: SqlRecord, sid: str, max_tokens: int) -> list[str]:
    """The roles of the calls that started when the session had spent ``max_tokens``."""
    spent, late = 0, []
    for call in record.llm_calls(sid):
        if spent >= max_tokens:
            late.append(call.role)
        spent += call.prompt_tokens + call.completion_tokens
    return late


def test_a_spent_budget_stops_the_next_call_even_a_repair(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_settings: Settings
) -> None:
    llm.script("planner", CYCLE, {"goal": "echo", "steps": [echo("ok", "fine")]})
    budget = 60  # the planner's first prompt alone is larger

    sid = llm_producer.submit_goal(
        "echo fine", tools=["bench"], options=SessionOptions(mode="plan", max_tokens=budget)
    )
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED, session.error
    assert "token budget spent (" in session.error
    assert len(llm.requests_for("planner")) == 1  # the repair never started
    assert calls_started_past(llm_record, sid, budget) == []  # at most one call over
    totals = wait_totals_equal(llm, llm_settings, sid)
    assert totals["prompt_tokens"] + totals["completion_tokens"] > budget
