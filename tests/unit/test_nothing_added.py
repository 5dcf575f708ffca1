"""Answers that add nothing: the pure rules of nothing_added.py, the planner's
acceptance of an empty answer, and what a round and a decision do with it, over the
in-memory store and a scripted chat model (no Redis, no HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core.models import Event, EventType, SessionStatus, StepState, StepStatus
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.planner.plan_repairs import ask_until_accepted, judged
from planloop.planner.replans import Replanner
from planloop.planner.situation import Situation
from planloop.supervisor.session.nothing_added import (
    DROPPED_NOTE,
    dropped_steps,
    nothing_added_verdict,
    unreplaced_critical,
)
from planloop.supervisor.session.state import FINAL
from planloop.supervisor.session.verdict import Decision, Verdict
from tests.unit.loop_fixtures import SID, Loop, registry, run, step
from tests.unit.test_rounds import ScriptedChat, critique, ended_round
from tests.unit.test_session_loop_turns import decisions, runner

EMPTY: dict[str, Any] = {"steps": [], "reasoning": "nothing to add"}
CHAIN = Plan(steps=[step("a"), step("b", "a", critical=True), step("c", "b"), step("d", "a")])


def states(**statuses: StepStatus) -> dict[str, StepState]:
    """Step states of CHAIN; a failure is final (settled for good), as a decision sees it."""
    made = {s.id: StepState(status=statuses.get(s.id, StepStatus.PENDING)) for s in CHAIN.steps}
    for st in made.values():
        if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED):
            st.note = FINAL
    return made


# --- the pure rules -----------------------------------------------------------------------
def test_the_removed_steps_and_their_orphans_are_dropped_unless_they_ended() -> None:
    now = states(a=StepStatus.COMPLETED, b=StepStatus.FAILED)

    assert dropped_steps(CHAIN, now, {"b"}) == ["c"]  # b ended (failed), c is its orphan
    assert dropped_steps(CHAIN, now, {"d"}) == ["d"]
    assert dropped_steps(CHAIN, now, {"a"}) == []  # a completed step is never dropped
    assert dropped_steps(CHAIN, now, set()) == []


def test_a_critical_step_left_failed_is_unreplaced_unless_a_fallback_took_over() -> None:
    now = states(a=StepStatus.COMPLETED, b=StepStatus.FAILED, d=StepStatus.FAILED)

    assert unreplaced_critical(CHAIN, now, {}) == ["b"]  # d failed too, but is not critical
    assert unreplaced_critical(CHAIN, now, {"b": ["b_alt"]}) == []
    assert unreplaced_critical(CHAIN, states(b=StepStatus.INTERRUPTED), {}) == ["b"]
    assert unreplaced_critical(CHAIN, states(b=StepStatus.CANCELLED), {}) == []


def test_a_critical_step_left_failed_fails_the_session_by_the_rule_policy() -> None:
    asked = ReplanDecision(action=ReplanAction.REPLAN_REMAINING, reasoning="drop c")

    assert nothing_added_verdict(asked, []) is None  # the session goes on
    verdict = nothing_added_verdict(asked, ["b"])
    assert verdict is not None
    assert (verdict.choice.action, verdict.source) == (ReplanAction.ABORT, "rule")
    assert verdict.fail_session is True
    assert "critical step b failed" in verdict.choice.reasoning
    assert "REPLAN_REMAINING" in verdict.choice.reasoning


# --- the planner ----------------------------------------------------------------------------
def situation() -> Situation:
    return Situation(
        goal="g",
        constraints=(),
        steps=(),
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="REPLAN",
    )


@pytest.mark.parametrize("answer", [EMPTY, {"steps": []}])
def test_an_empty_subgraph_is_an_answer_not_an_error_to_repair(answer: dict[str, Any]) -> None:
    chat = ScriptedChat(replanner=[answer])
    plan = Plan(steps=[step("a")])

    replan = Replanner(chat, registry()).replan_remaining(  # type: ignore[arg-type]
        situation(), plan, set(), cancel={"a"}
    )

    # merged, it would leave no step at all: it is not merged, nor sent back
    assert replan.plan is None
    assert replan.added == frozenset()
    assert [u.role for u in replan.usages] == [Role.REPLANNER]


def test_a_full_replan_with_no_step_is_nothing_to_add() -> None:
    chat = ScriptedChat(replanner=[{"goal": "g", "steps": []}])

    replan = Replanner(chat, registry()).replan_full(  # type: ignore[arg-type]
        situation(), Plan(steps=[step("a"), step("b", "a")]), {"a"}
    )

    assert replan.plan is None
    assert len(replan.usages) == 1


def test_a_full_replan_with_steps_still_merges_them_after_the_completed_ones() -> None:
    new = {"goal": "g", "steps": [{"id": "b2", "tool": "t.b", "dependencies": ["a"]}]}
    chat = ScriptedChat(replanner=[new])

    replan = Replanner(chat, registry()).replan_full(  # type: ignore[arg-type]
        situation(), Plan(steps=[step("a"), step("b", "a")]), {"a"}
    )

    assert replan.plan is not None
    assert replan.plan.step_ids == ["a", "b2"]
    assert replan.added == {"b2"}


# --- a round, and a decision ------------------------------------------------------------------
def test_a_round_whose_replanner_adds_nothing_ends_completed_and_not_passed() -> None:
    chat = ScriptedChat(critic=[critique(False, "b is missing")], replanner=[EMPTY])
    loop, rounds = ended_round(chat, max_rounds=3)

    run(rounds.review())

    status, note = loop.state.outcome or (None, "")
    assert status == SessionStatus.COMPLETED
    assert "did not pass the results after 1 round(s)" in note
    assert "the re-planner added nothing" in note
    assert (loop.state.info.plan_version, loop.state.info.rounds) == (1, 0)
    assert [c["role"] for c in loop.state.batch.llm_calls] == ["critic", "replanner"]
    assert rounds.critique is not None
    assert rounds.critique.feedback == "b is missing"  # the verdict stands for the answer


def test_a_round_that_only_repeats_the_completed_step_adds_nothing() -> None:
    again = {"steps": [{"id": "a", "tool": "t.a"}]}
    chat = ScriptedChat(critic=[critique(False, "check a")], replanner=[again])
    loop, rounds = ended_round(chat, max_rounds=3)

    run(rounds.review())

    assert loop.state.outcome is not None
    assert "the re-planner added nothing" in loop.state.outcome[1]
    assert loop.state.info.plan_version == 1


def failed_b(loop: Loop) -> list[Event]:
    loop.state.states["b"].note = FINAL  # settled for good: what a decision is about
    return [Event(type=EventType.TASK_FAILED, step_id="b", attempt=1, description="boom")]


def replan_decision(loop: Loop, chat: ScriptedChat, cancel: list[str]) -> Decision:
    loop.deliberation.chat = chat  # type: ignore[assignment]
    asked = ReplanDecision(
        action=ReplanAction.REPLAN_REMAINING, reasoning="b cannot work", steps_to_cancel=cancel
    )
    return Decision(Verdict(asked, "llm"), failed_b(loop), "CRITICAL")


def test_a_remaining_replan_that_adds_nothing_after_a_critical_failure_fails() -> None:
    loop = Loop(CHAIN, a=StepStatus.COMPLETED, b=StepStatus.FAILED)
    decision = replan_decision(loop, ScriptedChat(replanner=[EMPTY]), ["d"])

    run(loop.changes.execute(decision, loop.deliberation))

    assert loop.state.outcome is not None
    status, reason = loop.state.outcome
    assert status == SessionStatus.FAILED
    assert "critical step b failed and the re-planner added nothing" in reason
    assert {i: loop.state.states[i].status for i in "abcd"} == {
        "a": StepStatus.COMPLETED,
        "b": StepStatus.FAILED,
        "c": StepStatus.CANCELLED,  # the failed step's orphan
        "d": StepStatus.CANCELLED,  # named by the decision
    }
    assert loop.state.states["c"].note == DROPPED_NOTE
    assert loop.state.info.replans == 1  # the re-planner was asked: a re-plan is counted
    assert loop.state.info.plan_version == 1  # nothing installed
    assert [(d["action"], d["source"]) for d in loop.decisions()] == [("ABORT", "rule")]
    assert [c["role"] for c in loop.llm_calls()] == ["replanner"]
    assert (SID, "nothing_added", {"dropped": "c,d"}) in loop.store.progress


def test_a_remaining_replan_that_adds_nothing_after_a_minor_failure_goes_on() -> None:
    plan = Plan(steps=[step("a"), step("b", "a"), step("c", "b"), step("d", "a")])
    loop = Loop(plan, a=StepStatus.COMPLETED, b=StepStatus.FAILED)
    decision = replan_decision(loop, ScriptedChat(replanner=[EMPTY]), [])

    run(loop.changes.execute(decision, loop.deliberation))

    assert loop.state.outcome is None  # d still runs
    assert loop.state.states["c"].status == StepStatus.CANCELLED
    assert loop.state.states["d"].status == StepStatus.PENDING
    assert loop.state.batch.decisions == []


# --- recorded before carried out ----------------------------------------------------------------
def test_a_decision_is_committed_with_its_calls_before_it_is_carried_out() -> None:
    loop, _store = runner(Plan(steps=[step("a")]))
    asked = ReplanDecision(action=ReplanAction.ABORT, reasoning="stop")
    usage_verdict = Verdict(asked, "llm", [Usage(30, 7, 0.1, "m", Role.DECIDER)])

    class BoomError(Exception):
        pass

    async def crash(decision: Decision, deliberation: object) -> None:
        raise BoomError("the carrying out crashed")

    loop.changes.execute = crash  # type: ignore[method-assign]
    with pytest.raises(BoomError):
        run(loop.decisions.carry_out(Decision(usage_verdict, [], "CRITICAL")))

    (row,) = decisions(loop)
    assert (row["action"], row["source"]) == ("ABORT", "llm")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (30, 7)
    record = loop.ctx.record
    calls = [c for batch in record.batches for c in batch.llm_calls]  # type: ignore[attr-defined]
    assert [(c["role"], c["prompt_tokens"]) for c in calls] == [("decider", 30)]
    assert loop.state.batch.decisions == []  # not written a second time
    assert loop.state.fold_usage() == {"m": [30, 7]}  # and still counted in the budgets


# --- a plan built from an answer that pydantic refuses ------------------------------------
def test_a_plan_pydantic_refuses_in_a_check_is_repaired_then_a_plan_error() -> None:
    from planloop.core.errors import PlanValidationError
    from planloop.planner.decision import SubGraph

    chat = ScriptedChat(replanner=[EMPTY, EMPTY])

    def check(answer: SubGraph) -> Plan:
        return Plan(steps=answer.steps)  # the shape of a crash seen before

    with pytest.raises(PlanValidationError, match="still invalid after 1 repair"):
        ask_until_accepted(
            chat,  # type: ignore[arg-type]
            Role.REPLANNER,
            [],
            SubGraph,
            lambda answer: judged(lambda: check(answer)),
            max_repairs=1,
        )
    assert len(chat.asked) == 2
    assert "the resulting plan is invalid at steps" in chat.asked[1][1][-1]["content"]


def test_the_rules_escalation_is_committed_before_the_session_ends_too() -> None:
    loop, _store = runner(CHAIN)
    loop.state.states["a"].status = StepStatus.COMPLETED
    loop.state.states["b"].status, loop.state.states["b"].note = StepStatus.FAILED, FINAL
    loop.deliberation.chat = ScriptedChat(replanner=[EMPTY])  # type: ignore[assignment]
    asked = ReplanDecision(action=ReplanAction.REPLAN_REMAINING, reasoning="b cannot work")
    failed = [Event(type=EventType.TASK_FAILED, step_id="b", attempt=1, description="boom")]

    run(loop.decisions.carry_out(Decision(Verdict(asked, "llm"), failed, "CRITICAL")))

    assert loop.state.outcome is not None
    assert loop.state.outcome[0] == SessionStatus.FAILED
    assert loop.state.batch.decisions == []  # both went to SQL as they were made
    assert [(d["action"], d["source"]) for d in decisions(loop)] == [
        ("REPLAN_REMAINING", "llm"),
        ("ABORT", "rule"),
    ]


# --- answers with no text ---------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   \n"])
def test_an_answer_with_no_text_is_refused_for_repair(text: str) -> None:
    from pydantic import ValidationError

    from planloop.planner.summarizer import Answer

    with pytest.raises(ValidationError, match="the answer's text is empty"):
        Answer.model_validate({"text": text, "data": None})


@pytest.mark.parametrize("blank", ["", " ", {"text": "", "data": {"n": 1}}, {"text": None}])
def test_a_passing_verdict_with_a_blank_answer_keeps_the_verdict_without_it(blank: Any) -> None:
    from planloop.planner.critic import CriticReply

    reply = CriticReply.model_validate({"passed": True, "answer": blank})

    assert reply.passed is True
    assert reply.stated_answer() is None  # the summarizer writes the answer
