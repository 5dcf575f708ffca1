"""The session loop's changes through the in-memory store: plan installs, the deliberation's
triggers and verdicts, and how the loop carries a verdict out. No Redis, no LLM."""

from __future__ import annotations

import json

import pytest

from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError
from planloop.core.models import Event, EventType, SessionStatus, Severity, StepStatus
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.plan import Plan
from planloop.supervisor.io.redis_streams import stream_id
from planloop.supervisor.session.policy import rule_verdict
from planloop.supervisor.session.state import FINAL
from planloop.supervisor.session.verdict import Decision, Verdict
from tests.unit.loop_fixtures import EPOCH, SID, Loop, run, step


def failed_for_good(loop: Loop, step_id: str, severity: Severity = Severity.WARNING) -> Event:
    loop.state.states[step_id].status = StepStatus.FAILED
    loop.state.states[step_id].note = FINAL
    return Event(type=EventType.TASK_FAILED, severity=severity, step_id=step_id, attempt=1)


# --- plan installs ----------------------------------------------------------------------------
def test_installing_a_plan_version_keeps_ended_steps_starts_new_ones_and_drops_the_rest() -> None:
    loop = Loop(
        Plan(steps=[step("a"), step("b", "a"), step("c", "a")]),
        a=StepStatus.COMPLETED,
        b=StepStatus.RUNNING,
    )
    new = Plan(steps=[step("a"), step("c", "a"), step("e", "a")])
    run(loop.changes.install_plan(new, reason="test", replan=True))
    state = loop.state
    assert state.info.plan_version == 2
    assert state.info.replans == 1
    assert set(state.states) == {"a", "c", "e"}
    assert state.states["a"].status == StepStatus.COMPLETED
    assert state.states["e"].status == StepStatus.PENDING
    assert loop.step_hash("b")["status"] == "cancelled"  # dropped while it ran
    assert loop.step_hash("e")["status"] == "pending"
    assert json.loads(loop.store.strings[loop.store.keys.plan(SID, 2)])["steps"][2]["id"] == "e"
    assert loop.session_hash()["plan_version"] == "2"
    assert [v["version"] for v in state.batch.plan_versions] == [2]
    assert list(state.candidates.scan()) == ["c", "e"]


def test_a_write_at_a_lost_epoch_is_refused() -> None:
    loop = Loop(Plan(steps=[step("a")]))
    loop.store.own(SID, EPOCH + 1)  # another supervisor took the session
    with pytest.raises(FencedOutError):
        run(loop.changes.install_plan(Plan(steps=[step("a")]), reason="x", replan=False))


# --- the rule policy ------------------------------------------------------------------------
def test_the_rule_policy_injects_a_fallback_before_failing_a_critical_step() -> None:
    loop = Loop(
        Plan(
            steps=[
                step("a", critical=True),
                step("b", fallback=[step("alt", tool="t.alt")]),
                step("c"),
            ]
        )
    )
    changes = [failed_for_good(loop, "c"), failed_for_good(loop, "b")]
    verdict = rule_verdict(changes, loop.state.steps)
    assert verdict.choice.action == ReplanAction.REPLAN_REMAINING
    critical = rule_verdict([failed_for_good(loop, "a")], loop.state.steps)
    assert (critical.choice.action, critical.fail_session) == (ReplanAction.ABORT, True)
    plain = rule_verdict([failed_for_good(loop, "c")], loop.state.steps)
    assert plain.choice.action == ReplanAction.CONTINUE
    assert plain.source == "rule"


# --- batch triggers -------------------------------------------------------------------------
def test_warnings_are_decided_in_batches_and_a_critical_event_at_once() -> None:
    loop = Loop(
        Plan(steps=[step(i) for i in "abcd"] + [step("x", critical=True)]),
        settings=Settings(batch_react_size=3),
    )
    for step_id in "ab":
        loop.deliberation.note(failed_for_good(loop, step_id))
        assert run(loop.deliberation.maybe_decide(idle=False)) is None
    assert run(loop.deliberation.maybe_decide(idle=True)) is not None  # nothing else can run
    for step_id in "abc":
        loop.deliberation.note(failed_for_good(loop, step_id))
    decision = run(loop.deliberation.maybe_decide(idle=False))
    assert decision is not None
    assert "3 WARNING events" in decision.reason
    assert [e.step_id for e in decision.changes] == ["a", "b", "c"]
    loop.deliberation.note(failed_for_good(loop, "x", Severity.CRITICAL))
    decision = run(loop.deliberation.maybe_decide(idle=False))
    assert decision is not None
    assert decision.verdict.fail_session
    assert loop.state.outcome is None  # the deliberation decides; the loop carries it out


def test_a_spent_re_plan_budget_forces_an_abort() -> None:
    # a critical step failed for good: going on needs a plan change the budget rules out
    # (a failure the rules would continue past is decided without one: test_replan_budget.py)
    loop = Loop(Plan(steps=[step("a", critical=True)]), settings=Settings(max_replans=1))
    loop.state.info = loop.state.info.model_copy(update={"replans": 1})
    loop.deliberation.note(failed_for_good(loop, "a", Severity.CRITICAL))
    decision = run(loop.deliberation.maybe_decide(idle=False))
    assert decision is not None
    assert (decision.verdict.source, decision.verdict.choice.action) == (
        "budget",
        ReplanAction.ABORT,
    )


# --- carrying out a verdict -----------------------------------------------------------------
def decide(loop: Loop, *changes: Event) -> Decision:
    return Decision(rule_verdict(list(changes), loop.state.steps), list(changes), "test")


def test_continue_skips_the_failed_steps_descendants_and_says_so() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b", "a"), step("c", "b"), step("d")]))
    run(loop.changes.execute(decide(loop, failed_for_good(loop, "a")), loop.deliberation))
    assert {i: st.status for i, st in loop.state.states.items() if i != "a"} == {
        "b": StepStatus.SKIPPED,
        "c": StepStatus.SKIPPED,
        "d": StepStatus.PENDING,
    }
    assert loop.step_hash("c")["status"] == "skipped"
    events = [e for _, e in loop.state.batch.events]
    assert [e.type for e in events] == [EventType.DEPENDENCY_BROKEN]
    assert events[0].payload == {"skipped": ["b", "c"]}
    assert loop.state.outcome is None


def test_a_critical_failure_ends_the_session_failed() -> None:
    loop = Loop(Plan(steps=[step("a", critical=True), step("b")]))
    run(loop.changes.execute(decide(loop, failed_for_good(loop, "a")), loop.deliberation))
    assert loop.state.outcome is not None
    assert loop.state.outcome[0] == SessionStatus.FAILED
    assert "critical step a failed" in loop.state.outcome[1]


def test_a_declared_fallback_is_injected_as_the_next_plan_version() -> None:
    loop = Loop(Plan(steps=[step("a", fallback=[step("alt", tool="t.alt")]), step("b", "a")]))
    run(loop.changes.execute(decide(loop, failed_for_good(loop, "a")), loop.deliberation))
    state = loop.state
    assert state.info.plan_version == 2
    assert state.info.replans == 1
    assert [s.id for s in state.plan.steps] == ["a", "alt", "b"]
    assert state.steps["b"].dependencies == ["alt"]
    assert state.states["alt"].status == StepStatus.PENDING
    assert state.states["a"].status == StepStatus.FAILED  # it stays, failed for good
    kinds = [kind for _, kind, _ in loop.store.progress]
    assert kinds == ["decision", "replan_required"]


def test_a_verdict_awaiting_a_person_parks_the_changes_until_approved() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b", "a")]))
    change = failed_for_good(loop, "a")
    wait = Verdict(ReplanDecision(action=ReplanAction.CONTINUE, reasoning="budget"), "await_human")
    run(loop.changes.execute(Decision(wait, [change], "test"), loop.deliberation))
    assert loop.deliberation.awaiting == [change]
    assert loop.session_hash()["awaiting"] == "approval"
    assert loop.state.states["b"].status == StepStatus.PENDING  # nothing done yet
    approve = Event(type=EventType.EXTERNAL_SIGNAL, payload={"action": "abort"})
    decision = loop.deliberation.approve(approve)
    assert decision is not None
    assert decision.changes == [change]
    run(loop.changes.execute(decision, loop.deliberation))
    assert loop.state.outcome == (SessionStatus.ABORTED, "approved by a person: ABORT")


# --- stream ids -----------------------------------------------------------------------------
def test_stream_ids_order_as_numbers_not_as_text() -> None:
    ids = ["1700000000000-9", "1700000000000-10", "999-0"]
    assert min(ids, key=stream_id) == "999-0"
    assert max(ids, key=stream_id) == "1700000000000-10"
    assert max(ids) == "999-0"  # what comparing them as strings would have picked
