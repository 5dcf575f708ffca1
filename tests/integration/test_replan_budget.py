"""A spent re-plan budget aborts only what needs a re-plan, and the decision agent
is told the scope rule's pick between a full and an incremental re-plan.

Every session here runs with ``max_replans=0``: the budget is spent before anything happens.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from planloop.config.settings import Settings
from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.models import SessionOptions, SessionStatus, StepStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps, wait_ended
from tests.integration.llm_conftest import wait_recorded
from tests.llm_server import ScriptedLLMServer
from tests.shipped import shipped

pytestmark = pytest.mark.integration

NO_REPLANS = SessionOptions(max_replans=0)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``planloop ARGS`` from the installed wheel (the one place that names the command)."""
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env(env),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def running(hot: HotState, sid: str, step_id: str) -> bool:
    st = hot.steps(sid, [step_id]).get(step_id)
    return st is not None and st.status == StepStatus.RUNNING and st.started_at > 0


def decided_while_running(hot: HotState, sid: str, step_id: str) -> dict[str, str]:
    """The session's first decision (a progress note), asserted to come while ``step_id`` ran:
    a note that arrived after the step would prove nothing."""

    def decided() -> dict[str, str] | None:
        notes = [n for _, n in hot.progress(sid) if n.get("kind") == "decision"]
        return notes[0] if notes else None

    note = wait_for(decided, 20, "the note to be decided")
    assert running(hot, sid, step_id), "the step ended before the note was decided"
    return note


# --- a note is not a reason to re-plan --------------------------------------------------------
TWO_WRITES = """
goal: two writes, the second one slow enough to be running when a note arrives
steps:
  - {id: w1, tool: bench.write, params: {label: first}}
  - {id: w2, tool: bench.write, params: {label: second, seconds: 8}, dependencies: [w1]}
"""


def test_a_note_to_a_session_without_re_plans_left_lets_it_finish_with_its_writes(
    stack: Stack,
    producer: Producer,
    hot_state: HotState,
    effects: SqlEffectLedger,
    record: SqlRecord,
    env_overrides: dict[str, str],
) -> None:
    sid = producer.submit(parse_plan(TWO_WRITES), NO_REPLANS)
    wait_for(lambda: running(hot_state, sid, "w2"), 20, "the slow write to start")

    sent = cli(
        "signal",
        sid,
        "--signal",
        "fyi: the warehouse closes early",
        env={**os.environ, **env_overrides},
    )
    assert sent.returncode == 0, sent.stderr
    note = decided_while_running(hot_state, sid, "w2")
    assert (note["source"], note["action"]) == ("rule", "CONTINUE")
    session = wait_ended(producer, sid, 30)

    assert session.status == SessionStatus.COMPLETED, session.error
    steps = report_steps(session)
    assert [steps[i]["status"] for i in ("w1", "w2")] == ["completed", "completed"]
    assert steps["w2"]["attempts"] == 1  # not cancelled and run again
    for step_id in ("w1", "w2"):
        assert effects.count(f"{sid}:{step_id}") == 1
        assert effects.count(f"{sid}:{step_id}:compensate:undo") == 0
    assert session.report is not None
    assert session.report["compensations"] == []
    decisions = wait_for(lambda: record.decisions(sid), 10, "the decision in the SQL record")
    (row,) = decisions
    assert (row.source, row.action) == ("rule", "CONTINUE")
    assert row.reasoning.startswith("re-plan budget spent (0/0), decided by the rule policy")
    assert session.replans == 0


def test_with_a_model_a_note_past_the_budget_is_decided_without_asking_it(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_hot: HotState,
    llm_effects: SqlEffectLedger,
    llm_settings: Settings,
) -> None:
    sid = llm_producer.submit(parse_plan(TWO_WRITES), NO_REPLANS)
    wait_for(lambda: running(llm_hot, sid, "w2"), 20, "the slow write to start")

    sent = cli(
        "signal", sid, "--signal", "just so you know", env={**os.environ, **llm_settings.to_env()}
    )
    assert sent.returncode == 0, sent.stderr
    note = decided_while_running(llm_hot, sid, "w2")
    assert (note["source"], note["action"]) == ("rule", "CONTINUE")
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert llm.requests_for("decider") == []  # the supervisor holds the budget, not the model
    assert [llm_effects.count(f"{sid}:{i}") for i in ("w1", "w2")] == [1, 1]
    assert [(d.source, d.action) for d in llm_record.decisions(sid)] == [("rule", "CONTINUE")]


# --- a failure that needs a re-plan -----------------------------------------------------------
WRITE_THEN_BROKEN = """
goal: a write, then a critical step whose fix is a re-plan (its fallback)
steps:
  - {id: w, tool: bench.write, params: {label: kept-or-undone}}
  - id: broken
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    dependencies: [w]
    critical: true
    fallback:
      - {id: alt, tool: bench.echo, params: {value: alternative}}
  - {id: after, tool: bench.echo, params: {value: done}, dependencies: [broken]}
"""


def test_a_failure_that_needs_a_re_plan_without_budget_is_a_forced_abort(
    stack: Stack, producer: Producer, effects: SqlEffectLedger, record: SqlRecord
) -> None:
    sid = producer.submit(parse_plan(WRITE_THEN_BROKEN), NO_REPLANS)
    session = wait_ended(producer, sid, 30)

    assert session.status == SessionStatus.ABORTED, session.error
    assert "re-plan budget spent (0/0): forced ABORT" in (session.error or "")
    steps = report_steps(session)
    assert steps["broken"]["status"] == "failed"
    assert "alt" not in steps  # no fallback was injected past the budget
    assert effects.count(f"{sid}:w:compensate:undo") == 1
    decisions = wait_for(lambda: record.decisions(sid), 10, "the decision in the SQL record")
    assert [(d.source, d.action) for d in decisions] == [("budget", "ABORT")]


def wait_for_a_person(ps: PrivateStack, sid: str) -> None:
    def waiting() -> bool:
        notes = [n.get("kind") for _, n in ps.hot.progress(sid)]
        return "approval_required" in notes and ps.producer.session(sid).awaiting == "approval"

    wait_for(waiting, 30, "the session to wait for a person")


def test_with_approval_on_budget_a_person_chooses_continue_or_abort(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(approval_on_budget=True)
    env = {**os.environ, **ps.settings.to_env()}
    going_on = ps.producer.submit(parse_plan(WRITE_THEN_BROKEN), NO_REPLANS)
    stopping = ps.producer.submit(parse_plan(WRITE_THEN_BROKEN), NO_REPLANS)
    for sid in (going_on, stopping):
        wait_for_a_person(ps, sid)
        assert not ps.producer.session(sid).status.ended
        assert ps.hot.steps(sid, ["after"])["after"].attempt == 0  # nothing ran past it

    answered = cli(
        "approve", going_on, "--action", "continue", "--note", "ship without it", env=env
    )
    assert answered.returncode == 0, answered.stderr
    answered = cli("approve", stopping, "--action", "abort", env=env)
    assert answered.returncode == 0, answered.stderr

    went_on = wait_ended(ps.producer, going_on, 30)
    steps = report_steps(went_on)
    # the person chose to go on without the broken step: it ends like a skipped branch
    assert went_on.status == SessionStatus.COMPLETED, went_on.error
    assert went_on.error == "completed around failed steps: broken"
    assert steps["after"]["status"] == "skipped"
    assert "alt" not in steps
    assert ps.effects.count(f"{going_on}:w") == 1
    stopped = wait_ended(ps.producer, stopping, 30)
    assert stopped.status == SessionStatus.ABORTED, stopped.error
    assert ps.effects.count(f"{stopping}:w:compensate:undo") == 1
    for sid, action in ((going_on, "CONTINUE"), (stopping, "ABORT")):
        decisions = wait_for(
            lambda sid=sid: len(ps.record.decisions(sid)) >= 2 and ps.record.decisions(sid),
            10,
            "both decisions recorded",
        )
        assert [(d.source, d.action) for d in decisions] == [
            ("await_human", "CONTINUE"),
            ("human", action),
        ]


# --- the scope rule's pick reaches the decision agent -----------------------------------------
CHAIN = """
goal: a chain whose first step fails, so most of the plan hangs off it
steps:
  - id: x
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    critical: true
  - {id: y, tool: bench.echo, params: {value: 1}, dependencies: [x]}
  - {id: z, tool: bench.echo, params: {value: 2}, dependencies: [y]}
  - {id: q, tool: bench.echo, params: {value: 3}, dependencies: [z]}
"""


def test_the_decision_agent_is_told_the_scope_rules_pick(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script(
        "decider",
        {"action": "ABORT", "reasoning": "x is gone", "steps_to_cancel": [], "confidence": 0.9},
    )
    sid = llm_producer.submit(parse_plan(CHAIN))
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.ABORTED, session.error
    (prompt,) = [r.prompt_text for r in llm.requests_for("decider")]
    assert (
        "Scope rule (full or incremental re-plan): REPLAN_FULL (3 of 4 steps downstream of x, "
        "3 levels deep, 0 re-plans so far)." in prompt
    )
    assert 'the report\'s "Scope rule" line' in prompt  # the template says what it means
