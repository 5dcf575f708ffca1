"""A spent re-plan budget escalates only what needs a plan change, and the supervisor (not the
decision agent) holds it: past it no model is asked. No Redis, no LLM server."""

from __future__ import annotations

from typing import TypeVar

import pytest
from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.models import Event, EventType, Severity, StepStatus
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.supervisor.session.replan_budget import ReplanBudget, spent_budget_verdict
from tests.unit.loop_fixtures import Loop, run, step

T = TypeVar("T", bound=BaseModel)

PLAN = Plan(
    steps=[
        step("fb", fallback=[step("alt", tool="t.alt")]),
        step("crit", critical=True),
        step("plain"),
        step("after", "plain"),
    ]
)
STEPS = PLAN.by_id
SPENT = ReplanBudget(replans=0, max_replans=0, approval=False)


def event(kind: EventType, step_id: str = "", severity: Severity = Severity.WARNING) -> Event:
    return Event(type=kind, severity=severity, step_id=step_id, description="d")


NOTE = event(EventType.EXTERNAL_SIGNAL, severity=Severity.CRITICAL)
CONSTRAINT = event(EventType.NEW_CONSTRAINT, severity=Severity.CRITICAL)


@pytest.mark.parametrize(
    "changes",
    [
        [NOTE],
        [event(EventType.MILESTONE_REACHED, severity=Severity.INFO)],
        [event(EventType.TASK_UNEXPECTED_RESULT, "plain")] * 3,
        [event(EventType.TASK_FAILED, "plain")],  # not critical, no fallback: skip its branch
        [NOTE, event(EventType.DEPENDENCY_BROKEN, "plain", Severity.INFO)],
    ],
)
def test_what_the_rules_would_continue_is_continued_without_a_re_plan(
    changes: list[Event],
) -> None:
    for approval in (False, True):
        budget = ReplanBudget(replans=1, max_replans=1, approval=approval)
        verdict = spent_budget_verdict(budget, changes, STEPS, planned_by_llm=True)
        assert verdict is not None
        assert (verdict.choice.action, verdict.source) == (ReplanAction.CONTINUE, "rule")
        assert verdict.choice.reasoning.startswith(
            "re-plan budget spent (1/1), decided by the rule policy without a re-plan: continue"
        )
        assert "no LLM configured" not in verdict.choice.reasoning


@pytest.mark.parametrize(
    ("changes", "planned_by_llm"),
    [
        ([event(EventType.TASK_FAILED, "fb")], False),  # a fallback to inject is a re-plan
        ([NOTE, event(EventType.TASK_FAILED, "crit", Severity.CRITICAL)], False),
        ([event(EventType.TASK_INTERRUPTED, "crit", Severity.CRITICAL)], True),
        ([CONSTRAINT], True),  # a model made the plan without the constraint
    ],
)
def test_a_change_that_needs_a_new_plan_escalates(
    changes: list[Event], planned_by_llm: bool
) -> None:
    verdict = spent_budget_verdict(SPENT, changes, STEPS, planned_by_llm=planned_by_llm)
    assert verdict is not None
    assert (verdict.choice.action, verdict.source) == (ReplanAction.ABORT, "budget")
    assert verdict.choice.reasoning == "re-plan budget spent (0/0): forced ABORT"
    waiting = ReplanBudget(replans=0, max_replans=0, approval=True)
    verdict = spent_budget_verdict(waiting, changes, STEPS, planned_by_llm=planned_by_llm)
    assert verdict is not None
    assert (verdict.choice.action, verdict.source) == (ReplanAction.CONTINUE, "await_human")
    assert verdict.choice.reasoning == "re-plan budget spent (0/0): waiting for a person"


def test_a_constraint_under_the_rule_policy_is_noted_and_the_session_goes_on() -> None:
    verdict = spent_budget_verdict(SPENT, [CONSTRAINT], STEPS, planned_by_llm=False)
    assert verdict is not None
    assert (verdict.choice.action, verdict.source) == (ReplanAction.CONTINUE, "rule")


def test_a_budget_with_re_plans_left_decides_nothing() -> None:
    budget = ReplanBudget(replans=1, max_replans=2, approval=False)
    failed = [event(EventType.TASK_FAILED, "fb")]
    assert spent_budget_verdict(budget, failed, STEPS, planned_by_llm=True) is None


class Chat:
    """A decision agent that answers REPLAN_FULL and remembers every prompt it was sent."""

    def __init__(self) -> None:
        self.prompts: list[tuple[Role, str]] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        self.prompts.append((role, "\n".join(m["content"] for m in messages)))
        answer = ReplanDecision(action=ReplanAction.REPLAN_FULL, reasoning="redo", confidence=1)
        return schema.model_validate(answer.model_dump()), Usage(1, 1, 0.0, "m", role.value)


def loop_with_model(max_replans: int) -> tuple[Loop, Chat]:
    loop = Loop(PLAN, Settings(max_replans=max_replans), plain=StepStatus.RUNNING)
    chat = Chat()
    loop.deliberation.chat = chat
    return loop, chat


def test_past_the_budget_the_decision_agent_is_not_asked() -> None:
    loop, chat = loop_with_model(max_replans=0)
    loop.deliberation.note(NOTE)
    decision = run(loop.deliberation.maybe_decide(idle=False))
    assert decision is not None
    assert (decision.verdict.choice.action, decision.verdict.source) == (
        ReplanAction.CONTINUE,
        "rule",
    )
    loop.state.states["fb"].status = StepStatus.FAILED
    loop.deliberation.note(event(EventType.TASK_FAILED, "fb", Severity.CRITICAL))
    decision = run(loop.deliberation.maybe_decide(idle=False))
    assert decision is not None
    assert (decision.verdict.choice.action, decision.verdict.source) == (
        ReplanAction.ABORT,
        "budget",
    )
    assert chat.prompts == []  # the model could not have chosen a re-plan past the budget


def test_with_re_plans_left_the_decision_agent_is_told_the_scope_rules_pick() -> None:
    loop, chat = loop_with_model(max_replans=1)
    loop.state.states["plain"].status = StepStatus.FAILED
    loop.deliberation.note(event(EventType.TASK_FAILED, "plain", Severity.CRITICAL))
    decision = run(loop.deliberation.maybe_decide(idle=False))
    assert decision is not None
    assert decision.verdict.source == "llm"
    [(role, prompt)] = chat.prompts
    assert role == Role.DECIDER
    assert (
        "Scope rule (full or incremental re-plan): REPLAN_REMAINING (1 of 4 steps downstream "
        "of plain, 1 level deep, 0 re-plans so far)." in prompt
    )
