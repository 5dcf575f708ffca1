"""Agent steps and routing end to end: real Redis, a worker and a supervisor, the scripted LLM
server answering the ``react``, ``router`` and ``planner`` roles over HTTP.

The worker reaches the scripted server through the same PLANLOOP_LLM_* settings the
supervisor gets (llm_conftest's stack passes them to every process).
"""

from __future__ import annotations

from typing import Any

import pytest

from planloop.config.settings import Settings
from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan, parse_plan
from planloop.planner.react_step import REACT_TOOL
from planloop.producer.client import Producer
from tests.integration.conftest import RunPlan, report_steps
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_cli import planloop
from tests.integration.test_planning_loop import SIDE_ROLES, decision
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration

AGENT_PLAN = """
goal: an agent step that reads, writes, then answers
steps:
  - {id: seed, tool: bench.echo, params: {value: 42}}
  - id: agent
    tool: agent.react
    instruction: Echo a greeting, record one write, then report what you did
    params:
      tools: [bench.echo, bench.write]
      max_iterations: 4
      context: {n: "{{seed.output.value}}"}
    dependencies: [seed]
"""


def notes(hot: HotState, sid: str, kind: str) -> list[dict[str, str]]:
    return [fields for _, fields in hot.progress(sid) if fields.get("kind") == kind]


def first_version(record: SqlRecord, sid: str) -> Plan:
    row = next(v for v in record.plan_versions(sid) if v.version == 1)
    return Plan.model_validate_json(row.plan)


def turn(tool: str, **params: Any) -> dict[str, Any]:
    return {"thought": f"call {tool}", "tool": tool, "params": params}


def answer(**data: Any) -> dict[str, Any]:
    return {"thought": "done", "final_answer": data}


def test_an_agent_step_calls_two_tools_and_answers(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    llm_effects: SqlEffectLedger,
) -> None:
    llm.script(
        "react",
        turn("bench.echo", value="hello"),
        turn("bench.write", label="agent-write"),
        answer(greeting="hello", wrote=True, n=42),
    )

    sid = llm_producer.submit(parse_plan(AGENT_PLAN))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    output = report_steps(session)["agent"]["output"]
    assert output["answer"] == {"greeting": "hello", "wrote": True, "n": 42}
    assert output["tool_calls"] == [
        {"iteration": 1, "tool": "bench.echo", "ok": True},
        {"iteration": 2, "tool": "bench.write", "ok": True},
    ]
    # the write went through the effect ledger under the step's key and the turn
    assert llm_effects.count(f"{sid}:agent:react:2") == 1
    told = [r.prompt_text for r in llm.requests_for("react")]
    assert len(told) == 3
    assert '"n": 42' in told[0]  # the context's reference was resolved at dispatch
    assert '"value": "hello"' in told[1]  # the first observation reached the model
    assert f"{sid}:agent:react:2" in told[2]  # and the write's receipt
    # every turn was streamed as progress, with its tokens
    streamed = notes(llm_hot, sid, "react_iteration")
    assert [(n["iteration"], n["tool"], n["final"]) for n in streamed] == [
        ("1", "bench.echo", "0"),
        ("2", "bench.write", "0"),
        ("3", "", "1"),
    ]
    assert all(int(n["prompt_tokens"]) > 0 for n in streamed)
    # the loop's LLM calls count in the session's budget and its SQL record
    calls = [c for c in llm_record.llm_calls(sid) if c.role == "react"]
    assert len(calls) == 3
    assert sum(c.prompt_tokens for c in calls) == sum(int(n["prompt_tokens"]) for n in streamed)
    assert sum(sum(tokens) for tokens in session.llm_usage.values()) > 0


def test_a_planner_that_keeps_failing_falls_back_to_one_agent_step(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    cycle = {
        "steps": [
            {"id": "a", "tool": "bench.echo", "params": {"value": 1}, "dependencies": ["b"]},
            {"id": "b", "tool": "bench.echo", "params": {"value": 2}, "dependencies": ["a"]},
        ]
    }
    llm.script("planner", cycle, cycle, cycle)
    llm.script("react", turn("bench.echo", value="found"), answer(result="found"))

    sid = llm_producer.submit_goal(
        "echo found", tools=["bench"], options=SessionOptions(mode="plan")
    )
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert len(llm.requests_for("planner")) == 3  # the planner and both its repairs
    assert llm.requests_for("router") == []  # mode plan: no router
    (step,) = first_version(llm_record, sid).steps
    assert (step.tool, step.instruction) == (REACT_TOOL, "echo found")
    assert report_steps(session)["agent"]["output"]["answer"] == {"result": "found"}
    said = [e for _, e in llm_hot.events(sid) if e.payload.get("notice") == "react_fallback"]
    assert len(said) == 1
    assert "planning failed after its repairs" in said[0].description
    assert "cycle" in said[0].description
    assert len(notes(llm_hot, sid, "react_fallback")) == 1


def test_auto_mode_routes_an_open_ended_goal_to_one_agent_step(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script("router", {"mode": "react", "reasoning": "open-ended exploration"})
    llm.script("react", answer(result="nothing to call"))

    sid = llm_producer.submit_goal("look around", tools=["bench"])
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert llm.requests_for("planner") == []
    assert [s.tool for s in first_version(llm_record, sid).steps] == [REACT_TOOL]
    roles = sorted(c.role for c in llm_record.llm_calls(sid) if c.role not in SIDE_ROLES)
    # the round ends with the critic's verdict and the summarizer's answer
    assert roles == ["critic", "react", "router", "summarizer"]


def test_submit_mode_react_from_the_command_line(
    llm: ScriptedLLMServer,
    llm_settings: Settings,
    llm_producer: Producer,
    llm_record: SqlRecord,
) -> None:
    llm.script("react", turn("bench.echo", value="cli"), answer(result="cli"))

    result = planloop(
        llm_settings.to_env(), "submit", "--goal", "echo cli", "--tools", "bench", "--mode", "react"
    )

    assert result.returncode == 0, result.stderr
    sid = result.stdout.strip()
    assert llm_producer.session(sid).options.mode == "react"
    session = wait_recorded(llm_producer, llm_record, sid)
    assert session.status == SessionStatus.COMPLETED, session.error
    assert llm.requests_for("router") == []
    assert llm.requests_for("planner") == []
    assert report_steps(session)["agent"]["output"]["answer"] == {"result": "cli"}


def test_an_agent_step_on_workers_without_an_llm_fails_and_says_why(run_plan: RunPlan) -> None:
    """The rule-policy stack's workers have no PLANLOOP_LLM_BASE_URL."""
    plan = AGENT_PLAN.replace("dependencies: [seed]", "dependencies: [seed]\n    critical: true")

    _, session = run_plan(plan)

    assert session.status == SessionStatus.FAILED
    step = report_steps(session)["agent"]
    assert step["status"] == "failed"
    assert "agent steps need an LLM: set PLANLOOP_LLM_BASE_URL" in step["error"]


AGENT_WRITES_THEN_FAIL = """
goal: a write, an agent step that writes twice, then a critical step that fails for good
steps:
  - {id: w0, tool: bench.write, params: {label: before-the-agent}}
  - id: agent
    tool: agent.react
    instruction: Record two writes, then report
    params: {tools: [bench.write], max_iterations: 3}
    dependencies: [w0]
  - id: bad
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    dependencies: [agent]
    max_retries: 0
    critical: true
"""


def test_an_abort_undoes_the_writes_of_an_agent_step_newest_first(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_effects: SqlEffectLedger,
) -> None:
    llm.script(
        "react",
        turn("bench.write", label="agent-first"),
        turn("bench.write", label="agent-second"),
        answer(wrote=2),
    )
    llm.script("decider", decision("ABORT", "the critical step cannot succeed"))

    sid = llm_producer.submit(parse_plan(AGENT_WRITES_THEN_FAIL))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED, session.error
    comps = (session.report or {})["compensations"]
    assert [(c["step"], c.get("iteration"), c["tool"], c["status"]) for c in comps] == [
        ("agent", 2, "bench.undo_write", "completed"),
        ("agent", 1, "bench.undo_write", "completed"),
        ("w0", None, "bench.undo_write", "completed"),
    ], comps
    for turn_number in (1, 2):  # each write undone once, under a key of its own
        assert llm_effects.count(f"{sid}:agent:react:{turn_number}") == 1
        assert llm_effects.count(f"{sid}:agent:react:{turn_number}:compensate:undo") == 1
    assert llm_effects.count(f"{sid}:w0:compensate:undo") == 1


def test_the_writes_of_an_agent_step_that_failed_are_undone_too(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_effects: SqlEffectLedger,
) -> None:
    # two writes, then a third call in the last turn (never run): the loop ends without an
    # answer and the step fails
    llm.script(
        "react",
        turn("bench.write", label="agent-first"),
        turn("bench.write", label="agent-second"),
        turn("bench.write", label="agent-third"),
    )
    llm.script("decider", decision("ABORT", "the agent could not finish"))
    plan = AGENT_WRITES_THEN_FAIL.replace(
        "dependencies: [w0]", "dependencies: [w0]\n    critical: true\n    max_retries: 0"
    )

    sid = llm_producer.submit(parse_plan(plan))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED, session.error
    assert report_steps(session)["agent"]["status"] == "failed"
    comps = (session.report or {})["compensations"]
    assert [(c["step"], c.get("iteration")) for c in comps] == [
        ("agent", 2),
        ("agent", 1),
        ("w0", None),
    ], comps
    assert llm_effects.count(f"{sid}:agent:react:2:compensate:undo") == 1
    assert llm_effects.count(f"{sid}:agent:react:3") == 0  # the last turn's call never ran
