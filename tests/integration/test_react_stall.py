"""ReAct stalls end cleanly, end to end: real Redis, a worker and a supervisor from the
installed wheel, the scripted LLM server answering the ``react`` and ``decider`` roles.

A model that repeats the same call with the same result, or whose calls keep being refused
(tools that do not exist, params that do not fit), ends its agent step as stalled after the
third turn (the default thresholds): no further turn is asked for and no further tool runs,
the attempt is not retried, the decider reads the stall error, and the session ends with its
report.
"""

from __future__ import annotations

import pytest

from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.models import SessionStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from tests.integration.conftest import report_steps
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_planning_loop import decision
from tests.integration.test_react_steps import answer, notes, turn
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration

REPEATING_PLAN = """
goal: an agent step whose model asks the same thing again and again
steps:
  - id: agent
    tool: agent.react
    instruction: Echo a greeting, record one write, then report
    params: {tools: [bench.echo, bench.write], max_iterations: 8}
    critical: true
"""

REFUSED_PLAN = """
goal: an agent step whose model calls tools that do not exist, beside a step that works
steps:
  - {id: seed, tool: bench.echo, params: {value: 1}}
  - id: agent
    tool: agent.react
    instruction: Look the product up on the web
    params: {tools: [bench.echo, bench.write], max_iterations: 8}
  - {id: after, tool: bench.echo, params: {value: "{{agent.output.answer}}"}, dependencies: [agent]}
"""


def react_calls(record: SqlRecord, sid: str) -> int:
    return len([c for c in record.llm_calls(sid) if c.role == "react"])


def tool_turns(hot: HotState, sid: str) -> list[tuple[str, str]]:
    """The (tool, ok) of each streamed turn that called a tool."""
    return [(n["tool"], n["ok"]) for n in notes(hot, sid, "react_iteration") if n["tool"]]


def test_the_same_call_with_the_same_result_three_times_stalls_the_step(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    llm_effects: SqlEffectLedger,
) -> None:
    same = turn("bench.echo", value="same")
    # a fourth turn that would write, then an answer: neither may be asked for
    llm.script("react", same, same, same, turn("bench.write", label="after-stall"), answer())
    llm.script("decider", decision("ABORT", "the agent is stuck in a loop"))

    sid = llm_producer.submit(parse_plan(REPEATING_PLAN))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED, session.error
    step = report_steps(session)["agent"]
    assert step["status"] == "failed"
    assert step["attempts"] == 1  # permanent: not retried (max_retries defaults to 2)
    error = step["error"]
    assert error.startswith("AgentStepStalled: agent step 'agent' stalled (repeated)"), error
    assert "the same call gave the same observation 3 times in a row" in error
    assert 'bench.echo {"value": "same"}' in error
    # the model was asked three times, each call ran once, and nothing ran after the stall
    assert len(llm.requests_for("react")) == 3
    assert llm.pending("react") == 2
    assert tool_turns(llm_hot, sid) == [("bench.echo", "1")] * 3
    assert llm_effects.count(f"{sid}:agent:react:4") == 0
    # the three turns' tokens are on the session's record
    assert react_calls(llm_record, sid) == 3
    # the decider read the stall: the step's error and the failure event
    (asked,) = llm.requests_for("decider")
    prompt = asked.prompt_text
    assert "stalled (repeated)" in prompt
    assert 'bench.echo {"value": "same"}' in prompt
    assert session.report is not None
    assert session.report["status"] == "aborted"


def test_three_refused_calls_in_a_row_stall_the_step_and_the_rest_goes_on(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    llm_effects: SqlEffectLedger,
) -> None:
    llm.script(
        "react",
        turn("web.search", q="SKU12345 reviews"),
        turn("bench.echo", text="params that do not fit"),  # refused by the worker
        turn("browser.open", url="https://example.com"),
        turn("bench.write", label="after-stall"),  # never asked for
        answer(found=False),
    )
    llm.script("decider", decision("CONTINUE", "skip the web lookup, report what we have"))

    sid = llm_producer.submit(parse_plan(REFUSED_PLAN))
    session = wait_recorded(llm_producer, llm_record, sid)

    # a failed step that is not critical: the rest ran, the session completed around it
    assert session.status == SessionStatus.COMPLETED, session.error
    steps = report_steps(session)
    assert steps["seed"]["status"] == "completed"
    assert steps["agent"]["status"] == "failed"
    assert steps["agent"]["attempts"] == 1
    assert steps["after"]["status"] == "skipped"
    error = steps["agent"]["error"]
    assert error.startswith("AgentStepStalled: agent step 'agent' stalled (refused)"), error
    assert "3 tool calls in a row were refused; the last: browser.open" in error
    assert "'browser.open' is not allowed here" in error
    # nothing ran: three refused turns (the unknown tools refused by the loop, the params
    # by the worker's schema check), no fourth
    assert len(llm.requests_for("react")) == 3
    assert tool_turns(llm_hot, sid) == [
        ("web.search", "0"),
        ("bench.echo", "0"),
        ("browser.open", "0"),
    ]
    assert llm_effects.count(f"{sid}:agent:react:4") == 0
    assert react_calls(llm_record, sid) == 3
    (asked,) = llm.requests_for("decider")
    assert "stalled (refused)" in asked.prompt_text
    assert "browser.open" in asked.prompt_text
    # the session ended with its answer beside the report
    answered = session.answer or {}
    assert (answered.get("source"), answered.get("text")) == ("summarizer", "done"), answered
    assert session.report is not None
