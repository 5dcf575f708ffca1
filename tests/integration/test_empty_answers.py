"""Model answers that parse but add nothing, end to end: real Redis, workers and a
supervisor from the installed wheel, a scripted LLM over HTTP.

Each answer has a defined outcome: the session ends in a terminal state with an
answer, its decisions and their tokens are in the SQL record, and no supervisor logs a
crash of its loop.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr

from planloop.core.hot_state import HotState
from planloop.core.models import Event, EventType, SessionStatus, StepStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps, wait_ended
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_planning_loop import (
    FAIL,
    SIDE_ROLES,
    THREE_STEPS,
    decision,
    echo,
    notes,
    run,
    subgraph,
)
from tests.integration.test_rounds import ONE_STEP, critique
from tests.llm_server import ScriptedLLMServer, count_prompt_tokens

pytestmark = pytest.mark.integration

EMPTY: dict[str, Any] = {"steps": [], "reasoning": "nothing to add"}
# What a supervisor logs when a session's loop crashes (supervisor/process/service.py).
CRASHED = "loop crashed"


def roles_of(record: SqlRecord, sid: str) -> list[str]:
    """The roles of the session's recorded model calls, in order, without the side roles
    (reflection and embeddings, which may land after the end)."""
    return [c.role for c in record.llm_calls(sid) if c.role not in SIDE_ROLES]


def crash_lines(stack: Stack, sid: str) -> list[str]:
    """The supervisors' log lines saying ``sid``'s loop crashed."""
    lines: list[str] = []
    for path in sorted(stack.log_dir.glob("supervisor-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if f"session={sid}" in line and CRASHED in line:
                lines.append(line)
    return lines


def test_a_round_whose_replanner_adds_nothing_ends_with_the_critics_verdict(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("critic", critique(False, "the second value is missing", "second value"))
    llm.script("replanner", EMPTY)
    llm.script("summarizer", {"text": "only the first value: one", "data": None})

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    assert "did not pass the results" in session.error
    assert "the re-planner added nothing" in session.error
    assert (session.plan_version, session.replans) == (1, 0)  # no new version, no re-plan
    report = session.report or {}
    assert report["rounds"] == 1
    assert report["critique"]["passed"] is False
    assert report["critique"]["feedback"] == "the second value is missing"
    assert report["answer"]["text"] == "only the first value: one"
    assert report["answer"]["source"] == "summarizer"
    assert report_steps(session)["first"]["status"] == "completed"
    assert len(llm.requests_for("critic")) == 1  # the round ended: no second verdict
    assert len(llm.requests_for("replanner")) == 1  # "nothing to add" is no error to repair
    (summarizer,) = llm.requests_for("summarizer")
    assert "NOT passed" in summarizer.prompt_text
    roles = sorted(roles_of(llm_record, sid))
    assert roles == ["critic", "replanner", "summarizer"]  # the empty answer's tokens too
    assert llm.pending() == 0


def test_a_replan_that_adds_nothing_after_a_critical_failure_fails_the_session(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    llm_stack: Stack,
) -> None:
    llm.script("decider", decision("REPLAN_REMAINING", "s2 cannot work; drop s3", ["s3"]))
    llm.script("replanner", EMPTY)
    llm.script("summarizer", {"text": "s1 ran; s2 failed", "data": None})

    sid, session = run(llm_producer, llm_record, THREE_STEPS)

    assert crash_lines(llm_stack, sid) == []
    # s2 is critical and nothing took its place: the rule policy's answer, not "completed"
    assert session.status == SessionStatus.FAILED, session.error
    assert "critical step s2" in session.error
    assert "added nothing" in session.error
    assert (session.plan_version, session.replans) == (1, 1)
    steps = report_steps(session)
    assert steps["s1"]["status"] == "completed"
    assert steps["s2"]["status"] == "failed"
    s3 = llm_hot.steps(sid, ["s3"])["s3"]
    assert (s3.status, s3.attempt) == (StepStatus.CANCELLED, 0)  # dropped, never ran
    report = session.report or {}
    assert report["answer"]["text"] == "s1 ran; s2 failed"
    assert report["answer"]["partial"] is True
    # the decision is recorded with its tokens, and the re-planner's call with it
    rows = llm_record.decisions(sid)
    assert [(r.action, r.source) for r in rows] == [("REPLAN_REMAINING", "llm"), ("ABORT", "rule")]
    assert "critical step s2 failed and the re-planner added nothing" in rows[1].reasoning
    assert (rows[1].prompt_tokens, rows[1].completion_tokens) == (0, 0)  # no model call
    (decider,) = llm.requests_for("decider")
    assert rows[0].prompt_tokens == count_prompt_tokens(decider.messages)
    assert rows[0].completion_tokens > 0
    roles = roles_of(llm_record, sid)
    assert roles[:2] == ["decider", "replanner"]
    assert "summarizer" in roles
    (said,) = [n for n in notes(llm_hot, sid, "decision") if n["action"] == "REPLAN_REMAINING"]
    assert said["source"] == "llm"
    assert llm.pending() == 0


RESERVE_THEN_FAIL = f"""
goal: reserve stock, then a critical check that cannot succeed
steps:
  - {{id: reserve, tool: supply_chain.reserve_stock, params: {{sku: SKU12345, qty: 5}}}}
  - {{id: check, tool: bench.sleep, params: {FAIL}, dependencies: [reserve], max_retries: 0,
      critical: true}}
  - {{id: after, tool: bench.echo, params: {{value: later}}, dependencies: [check]}}
"""


def test_a_critical_failure_nothing_replaced_undoes_the_completed_write(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("decider", decision("REPLAN_REMAINING", "the check cannot pass", ["after"]))
    llm.script("replanner", EMPTY)

    sid, session = run(llm_producer, llm_record, RESERVE_THEN_FAIL)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.FAILED, session.error
    comps = (session.report or {})["compensations"]
    assert [(c["step"], c["tool"], c["status"]) for c in comps] == [
        ("reserve", "supply_chain.cancel_reservation", "completed")
    ]
    answer = (session.report or {})["answer"]
    assert answer["partial"] is True
    assert answer["text"] == "done"  # the summarizer's (the scripted default)


NOT_CRITICAL = THREE_STEPS.replace("critical: true", "critical: false")


def test_a_replan_that_adds_nothing_after_a_minor_failure_ends_with_what_it_has(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    llm_stack: Stack,
) -> None:
    llm.script("decider", decision("REPLAN_REMAINING", "s2 is not needed", []))
    llm.script("replanner", EMPTY)

    sid, session = run(llm_producer, llm_record, NOT_CRITICAL)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    assert "completed around failed steps: s2" in session.error
    steps = report_steps(session)
    assert steps["s1"]["status"] == "completed"
    assert steps["s2"]["status"] == "failed"
    s3 = llm_hot.steps(sid, ["s3"])["s3"]
    assert s3.status == StepStatus.CANCELLED  # the failed step's orphan is dropped
    assert (session.report or {})["answer"]["text"] == "done"
    (row,) = llm_record.decisions(sid)
    assert (row.action, row.source) == ("REPLAN_REMAINING", "llm")
    assert row.prompt_tokens > 0
    assert roles_of(llm_record, sid)[:2] == ["decider", "replanner"]


def test_a_full_replan_with_no_steps_ends_with_what_the_session_has(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("decider", decision("REPLAN_FULL", "start over"))
    llm.script("replanner", {"goal": "anything", "steps": []})
    llm.script("summarizer", {"text": "s1 ran; s2 failed", "data": None})

    sid, session = run(llm_producer, llm_record, THREE_STEPS)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.FAILED, session.error
    assert "critical step s2" in session.error
    assert len(llm.requests_for("replanner")) == 1
    rows = llm_record.decisions(sid)
    assert [(r.action, r.source) for r in rows] == [("REPLAN_FULL", "llm"), ("ABORT", "rule")]
    assert rows[0].prompt_tokens > 0
    assert roles_of(llm_record, sid)[:2] == ["decider", "replanner"]
    assert (session.report or {})["answer"]["text"] == "s1 ran; s2 failed"


def test_a_round_replan_that_only_repeats_a_completed_step_adds_nothing(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    # a sub-graph that only repeats the completed step unchanged adds nothing either
    llm.script("critic", critique(False, "check again"))
    llm.script("replanner", subgraph(echo("first", "one")))

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    assert "the re-planner added nothing" in session.error
    assert session.plan_version == 1


# --- every other model answer that parses but cannot be used ------------------------------
CYCLE = subgraph(echo("r1", "x", "r2"), echo("r2", "y", "r1"))


def test_a_subgraph_still_invalid_after_its_repairs_leaves_the_decision_to_the_rules(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("decider", decision("REPLAN_REMAINING", "replace s3 with a loop", ["s3"]))
    llm.script("replanner", CYCLE, CYCLE, CYCLE)  # the answer and its two repairs
    # the changes are decided again: the decider's next answers are unusable, so the rule
    # policy decides (s2 is critical and has no fallback: the session fails)
    llm.script("decider", *[json.dumps({"reasoning": "no action given"})] * 3)

    sid, session = run(llm_producer, llm_record, THREE_STEPS)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.FAILED, session.error
    assert "critical step s2 failed" in session.error
    assert (session.plan_version, session.replans) == (1, 1)  # the failed re-plan counts
    assert len(llm.requests_for("replanner")) == 3
    assert "cycle" in llm.requests_for("replanner")[1].prompt_text
    rows = llm_record.decisions(sid)
    assert [(r.action, r.source) for r in rows] == [("REPLAN_REMAINING", "llm"), ("ABORT", "rule")]
    assert rows[0].prompt_tokens > 0
    assert rows[1].reasoning.startswith("decision agent unavailable")
    assert (session.report or {})["answer"]["text"] == "done"
    assert llm.pending() == 0


@pytest.mark.parametrize(
    "reply",
    [
        {"action": "RETRY_LATER", "reasoning": "an action that does not exist"},
        {"reasoning": "the action is missing"},
        {"action": "CONTINUE", "reasoning": "too sure", "confidence": 7},
    ],
    ids=["unknown-action", "missing-field", "out-of-range"],
)
def test_a_decider_answer_that_breaks_its_schema_is_decided_by_the_rules(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_stack: Stack,
    reply: dict[str, Any],
) -> None:
    llm.script("decider", *[json.dumps(reply)] * 3)

    sid, session = run(llm_producer, llm_record, NOT_CRITICAL)

    assert crash_lines(llm_stack, sid) == []
    # s2 is not critical: the rules skip its branch and the session completes around it
    assert session.status == SessionStatus.COMPLETED, session.error
    assert "completed around failed steps: s2" in session.error
    (row,) = llm_record.decisions(sid)
    assert (row.action, row.source) == ("CONTINUE", "rule")
    assert row.reasoning.startswith("decision agent unavailable")
    assert len(llm.requests_for("decider")) == 3
    assert (session.report or {})["answer"]["text"] == "done"


def test_a_critic_whose_verdict_is_unusable_lets_the_round_stand(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("critic", *[json.dumps({"feedback": "no verdict given"})] * 3)
    llm.script("summarizer", {"text": "one", "data": None})

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.error == ""
    report = session.report or {}
    assert "critique" not in report  # no verdict to report
    assert report["answer"]["text"] == "one"
    assert len(llm.requests_for("critic")) == 3
    assert llm_record.decisions(sid) == []


def test_a_summarizer_whose_answer_is_unusable_gives_way_to_planloops_account(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("summarizer", *[json.dumps({"data": {"no": "text"}})] * 3)

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    answer = (session.report or {})["answer"]
    assert answer["source"] == "planloop"
    assert "The session ended completed." in answer["text"]
    assert "Completed: first." in answer["text"]
    assert len(llm.requests_for("summarizer")) == 3


def test_a_router_answering_an_unknown_mode_lets_the_goal_be_planned(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("router", *[json.dumps({"mode": "guess", "reasoning": "?"})] * 3)
    llm.script("planner", {"steps": [echo("only", "one")]})
    llm.script("summarizer", {"text": "one", "data": None})

    sid = llm_producer.submit_goal("echo one", tools=["bench"])
    session = wait_recorded(llm_producer, llm_record, sid)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    assert report_steps(session)["only"]["output"] == {"value": "one"}
    assert (session.report or {})["answer"]["text"] == "one"
    assert len(llm.requests_for("router")) == 3


def test_a_summarizer_answering_no_text_is_repaired(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("summarizer", {"text": "", "data": None}, {"text": "one", "data": None})

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    answer = (session.report or {})["answer"]
    assert (answer["text"], answer["source"]) == ("one", "summarizer")
    _first, repair = llm.requests_for("summarizer")
    assert "the answer's text is empty" in repair.prompt_text


def test_a_summarizer_that_never_writes_text_gives_way_to_planloops_account(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("summarizer", *[{"text": " ", "data": None}] * 3)

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    answer = (session.report or {})["answer"]
    assert answer["source"] == "planloop"
    assert answer["text"].startswith("The session ended completed.")


def test_a_passing_verdict_with_a_blank_answer_leaves_the_answer_to_the_summarizer(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_stack: Stack
) -> None:
    llm.script("critic", {"passed": True, "answer": ""})
    llm.script("summarizer", {"text": "one", "data": None})

    sid, session = run(llm_producer, llm_record, ONE_STEP)

    assert crash_lines(llm_stack, sid) == []
    assert session.status == SessionStatus.COMPLETED, session.error
    report = session.report or {}
    assert report["critique"]["passed"] is True
    assert (report["answer"]["text"], report["answer"]["source"]) == ("one", "summarizer")
    assert len(llm.requests_for("critic")) == 1  # the verdict stood: no repair


# --- a loop that crashes anyway (a cause not found yet) ---------------------------------------
WRITE_THEN_HOLD = """
goal: a write, then a step that holds the session open
steps:
  - {id: w, tool: bench.write, params: {label: first}}
  - {id: hold, tool: bench.sleep, params: {seconds: 30}, dependencies: [w], timeout_s: 60}
"""


def test_a_session_with_an_llm_that_crashes_too_often_still_ends_with_an_answer(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = private_stack(
        max_session_crashes=2,
        session_crash_cool_off_s=0.2,
        session_crash_cool_off_max_s=0.5,
        llm_base_url=llm.base_url,
        llm_api_key=SecretStr("test"),
        llm_max_retries=0,
    )
    sid = ps.producer.submit(parse_plan(WRITE_THEN_HOLD))
    wait_for(
        lambda: (
            (hold := ps.step_states(sid, ["hold"]).get("hold")) is not None
            and hold.status == StepStatus.RUNNING
        ),
        30,
        "the holding step to run",
    )
    attempt = ps.step_states(sid, ["hold"])["hold"].attempt
    # an outcome the loop cannot apply (its time is no number): the loop crashes on it
    poison = Event(
        type=EventType.TASK_COMPLETED,
        step_id="hold",
        attempt=attempt,
        payload={"started_at": "not a time"},
    )
    ps.redis.xadd(ps.keys.events(sid), poison.to_fields())  # type: ignore[arg-type]

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.FAILED
    assert "crashed 2 times" in record.error
    answer = (record.report or {})["answer"]
    assert (answer["source"], answer["partial"]) == ("planloop", True)
    assert answer["text"].startswith("The session ended FAILED: the session's loop crashed")
    assert "w undone" in answer["text"]  # its write was compensated
    assert "Completed: w." in answer["text"]
    assert [r.role for r in llm.requests] == []  # no model call while ending a crash loop
