"""LLM token and cost budgets end to end: real Redis, a worker and a supervisor, the scripted
OpenAI-compatible server (which reports usage from a real tokenizer)."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.core.models import SessionOptions, SessionStatus, StepStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps, wait_ended
from tests.integration.llm_conftest import wait_recorded
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration


def echo(step_id: str, value: Any, *deps: str) -> dict[str, Any]:
    return {"id": step_id, "tool": "bench.echo", "params": {"value": value}, "dependencies": deps}


PLAN = {
    "goal": "echo twice",
    "steps": [echo("one", "hello"), echo("two", "{{one.output.value}}", "one")],
}

FAILING = """
goal: the second step fails for good
steps:
  - {id: s1, tool: bench.echo, params: {value: first}}
  - {id: s2, tool: bench.sleep, params: {seconds: 0.01, simulate: {fail_attempts: [1],
      permanent: true}}, dependencies: [s1], max_retries: 0, critical: true}
  - {id: s3, tool: bench.echo, params: {value: last}, dependencies: [s2]}
"""


def test_a_tiny_token_budget_aborts_the_session_after_the_planning_call(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script("planner", PLAN)

    sid = llm_producer.submit_goal(
        "echo hello twice", tools=["bench"], options=SessionOptions(max_tokens=50)
    )
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED
    assert "token budget spent (" in session.error
    assert "of 50 tokens): forced ABORT" in session.error
    assert len(llm.requests_for("planner")) == 1
    assert not llm.requests_for("decider")  # no LLM call starts once it is spent
    calls = llm_record.llm_calls(sid)
    spent = sum(c.prompt_tokens + c.completion_tokens for c in calls)
    assert spent > 50
    assert f"token budget spent ({spent} of 50" in session.error
    # the running totals are in the session hash (a takeover goes on from them)
    assert sum(p + c for p, c in session.llm_usage.values()) == spent
    assert [d.source for d in llm_record.decisions(sid)] == ["budget"]
    states = llm_producer.state.steps(sid, ["one", "two"])
    assert all(st.status != StepStatus.COMPLETED for st in states.values())


def test_a_cost_budget_spent_by_the_decider_starts_no_replan(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
) -> None:
    model = llm_settings.llm_decider_model or llm_settings.llm_model
    price = llm_settings.llm_prices[model]  # the default table prices the default model
    llm.script(
        "decider",
        {
            "action": "REPLAN_REMAINING",
            "reasoning": "replace s2",
            "steps_to_cancel": ["s2"],
            "new_context_hints": [],
            "confidence": 0.8,
        },
    )
    llm.script("replanner", {"steps": [echo("s2b", "instead", "s1")], "reasoning": "x"})

    sid = llm_producer.submit(parse_plan(FAILING), SessionOptions(max_cost_usd=1e-6))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED
    assert "cost budget spent ($" in session.error
    assert "of $1e-06): forced ABORT" in session.error
    assert len(llm.requests_for("decider")) == 1
    assert not llm.requests_for("replanner")
    (call,) = llm_record.llm_calls(sid)
    cost = (
        call.prompt_tokens * price.input_per_mtok + call.completion_tokens * price.output_per_mtok
    ) / 1e6
    assert f"cost budget spent (${cost:.6f}" in session.error
    assert [d.source for d in llm_record.decisions(sid)] == ["llm", "budget"]


def test_a_spent_token_budget_waits_for_a_person_with_approval_on_budget(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = private_stack(
        approval_on_budget=True,
        llm_base_url=llm.base_url,
        llm_api_key=SecretStr("test"),
        llm_max_retries=0,
    )
    llm.script("planner", PLAN)
    sid = ps.producer.submit_goal(
        "echo hello twice", tools=["bench"], options=SessionOptions(max_tokens=50)
    )

    def waiting() -> list[dict[str, str]]:
        notes = [n for _, n in ps.hot.progress(sid) if n.get("kind") == "approval_required"]
        return notes if ps.producer.session(sid).awaiting == "approval" else []

    (note,) = wait_for(waiting, 20, "the session to wait for a person")
    assert "token budget spent (" in note["reason"]
    assert note["reason"].endswith("of 50 tokens): waiting for a person")
    assert not ps.producer.session(sid).status.ended

    ps.producer.approve(sid, "continue", "finish the steps, no more LLM calls")
    record = wait_ended(ps.producer, sid, 20)

    assert record.status == SessionStatus.COMPLETED, record.error
    assert report_steps(record)["two"]["output"] == {"value": "hello"}
    assert len(llm.requests_for("planner")) == 1
    sources = [(d.source, d.action) for d in ps.record.decisions(sid)]
    assert sources == [("await_human", "CONTINUE"), ("human", "CONTINUE")]


TWO_DECISIONS = """
goal: two failures, one before and one after a takeover
steps:
  - {id: f1, tool: bench.sleep, params: {seconds: 0.01, simulate: {fail_attempts: [1],
      permanent: true}}, max_retries: 0, critical: true}
  - {id: hold, tool: bench.sleep, params: {seconds: 5}, timeout_s: 30}
  - {id: f2, tool: bench.sleep, params: {seconds: 0.01, simulate: {fail_attempts: [1],
      permanent: true}}, dependencies: [hold], max_retries: 0, critical: true}
"""


def test_a_takeover_goes_on_counting_from_the_spent_totals(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = private_stack(llm_base_url=llm.base_url, llm_api_key=SecretStr("test"), llm_max_retries=0)
    go_on = {"action": "CONTINUE", "reasoning": "go on", "confidence": 0.9}
    llm.script("decider", go_on, go_on)
    sid = ps.producer.submit(parse_plan(TWO_DECISIONS), SessionOptions(max_tokens=10**6))

    def first_call_counted() -> bool:
        return bool(ps.hot.session(sid).llm_usage) and len(ps.record.llm_calls(sid)) == 1

    wait_for(first_call_counted, 20, "the first decision to be counted")
    first = sum(p + c for p, c in ps.hot.session(sid).llm_usage.values())
    victim = ps.owner_process(sid)
    assert victim is not None, "the session has no live owner"
    ps.signal(victim, signal.SIGKILL)
    ps.start_supervisor()
    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.COMPLETED, record.error
    assert len(llm.requests_for("decider")) == 2
    calls = ps.record.llm_calls(sid)
    assert [c.role for c in calls] == ["decider", "decider", "critic", "summarizer"]
    recorded = sum(c.prompt_tokens + c.completion_tokens for c in calls)
    totals = sum(p + c for p, c in record.llm_usage.values())
    assert totals == recorded > first  # the new owner added to the old owner's count
    assert set(ps.takeovers(sid)) == {1, 2}
