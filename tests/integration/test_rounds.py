"""Rounds with critique and the final answer, end to end: real Redis, workers and a
supervisor, a scripted LLM over HTTP (critic and summarizer answered by role)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from planloop.core.hot_state import HotState
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import load_plan
from planloop.producer.cli import read_answer_schema
from planloop.producer.client import Producer
from planloop.producer.views import print_show
from tests.integration.conftest import report_steps
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_planning_loop import (
    SIDE_ROLES,
    decision,
    echo,
    notes,
    prompts,
    run,
    subgraph,
)
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

ONE_STEP = """
goal: report the first and the second value
steps:
  - {id: first, tool: bench.echo, params: {value: one}}
"""
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"values": {"type": "array", "items": {"type": "string"}}},
    "required": ["values"],
}


def critique(passed: bool, feedback: str = "", *missing: str) -> dict[str, Any]:
    return {"passed": passed, "feedback": feedback, "missing": list(missing), "confidence": 0.9}


def test_the_critics_feedback_adds_the_missing_step_in_a_second_round(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    capsys: pytest.CaptureFixture[str],
) -> None:
    llm.script("critic", critique(False, "the second value is missing", "second value"))
    llm.script("replanner", subgraph(echo("second", "two", "first")))
    llm.script("summarizer", {"text": "one and two", "data": {"values": ["one", "two"]}})

    sid, session = run(llm_producer, llm_record, ONE_STEP, SessionOptions(answer_schema=SCHEMA))

    assert session.status == SessionStatus.COMPLETED, session.error
    assert (session.plan_version, session.replans) == (2, 0)  # a round is not a re-plan
    report = session.report or {}
    assert report["rounds"] == 2
    assert report["critique"]["passed"] is True  # the second round's verdict (the default)
    assert report["answer"] == {
        "text": "one and two",
        "data": {"values": ["one", "two"]},
        "schema_error": None,
        "partial": False,
        "source": "summarizer",
    }
    steps = report_steps(session)
    assert steps["second"]["status"] == "completed"
    assert steps["first"]["attempts"] == 1  # frozen: never run again
    (replan_prompt,) = prompts(llm, "replanner")
    assert "the second value is missing" in replan_prompt
    assert len(llm.requests_for("critic")) == 2
    assert "one" in prompts(llm, "summarizer")[0]
    assert [n["passed"] for n in notes(llm_hot, sid, "critique")] == ["False", "True"]
    assert session.answer is not None
    assert session.answer["text"] == "one and two"  # the Python API's result
    shown = Console(record=True, width=160, color_system=None)
    print_show(llm_producer, sid, as_json=False, console=shown)
    assert "answer: one and two" in shown.export_text()
    capsys.readouterr()
    print_show(llm_producer, sid, as_json=True)  # plain stdout
    doc = json.loads(capsys.readouterr().out)
    assert doc["report"]["answer"]["data"] == {"values": ["one", "two"]}


def test_an_answer_that_breaks_the_answer_schema_is_repaired(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script(
        "summarizer",
        {"text": "one", "data": {"values": "one"}},
        {"text": "one", "data": {"values": ["one"]}},
    )

    _, session = run(llm_producer, llm_record, ONE_STEP, SessionOptions(answer_schema=SCHEMA))

    assert session.status == SessionStatus.COMPLETED, session.error
    answer = (session.report or {})["answer"]
    assert answer["data"] == {"values": ["one"]}
    _first, repair = llm.requests_for("summarizer")
    assert "is not of type 'array'" in repair.prompt_text


def test_out_of_rounds_the_session_ends_completed_and_not_passed(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script(
        "critic",
        critique(False, "the second value is missing"),
        critique(False, "still not convincing"),
    )
    llm.script("replanner", subgraph(echo("second", "two", "first")))

    _, session = run(llm_producer, llm_record, ONE_STEP, SessionOptions(max_rounds=2))

    assert session.status == SessionStatus.COMPLETED, session.error
    assert "did not pass the results after 2 round(s)" in session.error
    report = session.report or {}
    assert report["rounds"] == 2
    assert report["critique"] == {
        "passed": False,
        "feedback": "still not convincing",
        "missing": [],
        "confidence": 0.9,
    }
    assert report["answer"]["text"] == "done"
    assert len(llm.requests_for("replanner")) == 1
    assert "NOT passed" in prompts(llm, "summarizer")[0]


def test_the_ecommerce_example_ends_with_advice_as_its_answer(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    schema = read_answer_schema(EXAMPLES / "ecommerce_answer.json")
    advice = {
        "stock_advice": "reserve the shortfall now",
        "pricing_advice": "stay below the cheapest competitor",
        "reserved_units": 42,
    }
    llm.script("summarizer", {"text": "Restock and hold the price.", "data": advice})

    sid = llm_producer.submit(load_plan(EXAMPLES / "ecommerce.yaml"), options(schema))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.answer is not None
    assert session.answer["data"] == advice
    (asked,) = prompts(llm, "summarizer")
    assert "SKU12345" in asked  # the goal
    assert "competitors (ecommerce.competitors" in asked  # the results, by preview
    assert '"stock_advice"' in asked  # the schema the data must fit


def options(schema: dict[str, Any]) -> SessionOptions:
    return SessionOptions(answer_schema=schema)


def test_a_goal_answered_with_no_tool(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.script("router", {"mode": "answer", "reasoning": "arithmetic on the goal's numbers"})
    llm.script("summarizer", {"text": "2 + 2 is 4", "data": None})

    sid = llm_producer.submit_goal("what is 2 + 2?", tools=["bench"])
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.plan_version == 0  # no plan was ever written
    assert list(llm_record.plan_versions(sid)) == []
    assert session.answer is not None
    assert session.answer["text"] == "2 + 2 is 4"
    report = session.report or {}
    assert report["steps"] == []
    assert report["answered_directly"] == "router: arithmetic on the goal's numbers"
    # the router and the summarizer only: no planner, no critic, no worker
    chat = sorted(c.role for c in llm_record.llm_calls(sid) if c.role not in SIDE_ROLES)
    assert chat == ["router", "summarizer"]
    (asked,) = prompts(llm, "summarizer")
    assert "what is 2 + 2?" in asked
    assert "no tool was used" in asked
    assert len(notes(llm_hot, sid, "answer_directly")) == 1


ANSWER_STEP = """
goal: report the first value
steps:
  - {id: first, tool: bench.echo, params: {value: one}}
  - id: answer
    tool: agent.answer
    params:
      text: "the first value is {{first.output.value}}"
      data: {values: ["{{first.output.value}}"]}
    dependencies: [first]
"""


def test_a_plan_that_ends_with_an_answer_step_answers_with_it(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    _, session = run(llm_producer, llm_record, ANSWER_STEP, SessionOptions(answer_schema=SCHEMA))

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.answer == {
        "text": "the first value is one",
        "data": {"values": ["one"]},
        "schema_error": None,
        "partial": False,
        "source": "answer_step",
    }
    assert llm.requests_for("summarizer") == []  # the plan stated its answer
    assert len(llm.requests_for("critic")) == 1  # the round is still judged


def test_an_answer_step_that_breaks_the_schema_is_repaired_by_the_summarizer(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script("summarizer", {"text": "one", "data": {"values": ["one"]}})
    bad = ANSWER_STEP.replace('data: {values: ["{{first.output.value}}"]}', "data: {n: 1}")

    _, session = run(llm_producer, llm_record, bad, SessionOptions(answer_schema=SCHEMA))

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.answer is not None
    assert (session.answer["data"], session.answer["source"]) == ({"values": ["one"]}, "summarizer")
    (asked,) = prompts(llm, "summarizer")
    assert "'values' is a required property" in asked
    assert "the first value is one" in asked  # the answer step's output, among the results


WRITE_THEN_FAIL = """
goal: a write, then a critical step that fails for good
steps:
  - {id: w, tool: bench.write, params: {label: partial}}
  - id: bad
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    dependencies: [w]
    max_retries: 0
    critical: true
"""


def test_an_aborted_session_ends_with_a_partial_answer(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    capsys: pytest.CaptureFixture[str],
) -> None:
    llm.script("decider", decision("ABORT", "the critical step cannot succeed"))
    llm.script("summarizer", {"text": "The write w was made and undone; bad failed.", "data": None})

    sid, session = run(llm_producer, llm_record, WRITE_THEN_FAIL)

    assert session.status == SessionStatus.ABORTED, session.error
    assert session.answer is not None  # the Python API's result
    assert session.answer["text"] == "The write w was made and undone; bad failed."
    assert (session.answer["partial"], session.answer["source"]) == (True, "summarizer")
    (asked,) = prompts(llm, "summarizer")
    assert "ABORTED: the critical step cannot succeed" in asked
    assert "bad (bench.sleep): failed" in asked
    assert "compensations: w undone" in asked  # asked once the write was undone
    assert llm.requests_for("critic") == []  # only a completed round is judged
    shown = Console(record=True, width=200, color_system=None)
    print_show(llm_producer, sid, as_json=False, console=shown)
    assert "answer (partial: the session did not complete): The write w" in shown.export_text()
    capsys.readouterr()
    print_show(llm_producer, sid, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["report"]["answer"]["partial"] is True


def test_a_terse_plan_and_a_critic_that_answers_with_its_verdict(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script("planner", {"steps": [["first", "bench.echo", {"value": "one"}, []]]})
    verdict = critique(True)
    llm.script("critic", {**verdict, "answer": {"text": "one", "data": {"values": ["one"]}}})

    sid = llm_producer.submit_goal(
        "report the first value",
        tools=["bench"],
        options=SessionOptions(mode="plan", answer_schema=SCHEMA),
    )
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.answer is not None
    assert (session.answer["data"], session.answer["source"]) == ({"values": ["one"]}, "critic")
    assert llm.requests_for("summarizer") == []  # one call fewer: the critic answered
    assert (session.report or {})["critique"] == verdict
    assert "[id, tool, params, dependencies]" in prompts(llm, "planner")[0]
    assert "also write the final answer" in prompts(llm, "critic")[0]
