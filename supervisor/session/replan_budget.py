"""A spent re-plan budget: what a trigger then leads to, decided by the supervisor.

Once a session has made ``max_replans`` re-plans, no decision may make another (DESIGN.md:
the budget is enforced by the supervisor, never by the LLM, so the decision agent is not
asked). What the trigger was about still matters:

1. Changes the rule policy would CONTINUE (a note, a milestone, warnings, a step that is not
   critical failed for good) need no plan change: the rules decide them, nothing runs past
   the budget and nothing is undone.
2. A change that needs a plan change (a fallback to inject, a critical step that failed for
   good, a new constraint when a model plans the session) escalates: a wait for a person
   (``approval_on_budget``, answered by ``planloop approve``), else a forced ABORT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planloop.core.models import Event, EventType
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.plan import Step
from planloop.supervisor.session.policy import RULE, rule_verdict
from planloop.supervisor.session.verdict import Verdict


@dataclass(frozen=True)
class ReplanBudget:
    """A session's re-plan budget and what a spent one escalates to."""

    replans: int  # re-plans made so far (failed attempts at one count too)
    max_replans: int  # the session's budget (option, else the setting)
    approval: bool  # the setting approval_on_budget: wait for a person instead of aborting

    @property
    def spent(self) -> bool:
        return self.replans >= self.max_replans

    @property
    def note(self) -> str:
        return f"re-plan budget spent ({self.replans}/{self.max_replans})"


def needs_plan_change(ruled: Verdict, changes: Sequence[Event], *, planned_by_llm: bool) -> bool:
    """Whether ``changes`` call for more than the rule policy's CONTINUE (``ruled``)."""
    if ruled.choice.action != ReplanAction.CONTINUE:
        return True
    # The rule policy notes a constraint and goes on; a model-made plan was made without it.
    return planned_by_llm and any(e.type == EventType.NEW_CONSTRAINT for e in changes)


def escalate(budget: ReplanBudget) -> Verdict:
    """The spent budget's answer to a change that needs a plan change."""
    if budget.approval:
        text = f"{budget.note}: waiting for a person"
        return Verdict(ReplanDecision(action=ReplanAction.CONTINUE, reasoning=text), "await_human")
    text = f"{budget.note}: forced ABORT"
    return Verdict(
        ReplanDecision(action=ReplanAction.ABORT, reasoning=text, confidence=1.0), "budget"
    )


def spent_budget_verdict(
    budget: ReplanBudget,
    changes: Sequence[Event],
    steps: Mapping[str, Step],
    *,
    planned_by_llm: bool,
) -> Verdict | None:
    """The verdict on ``changes`` when the budget is spent; None while re-plans are left.

    Args:
        budget: The session's re-plan budget.
        changes: The context changes decided on.
        steps: The current plan's steps by id.
        planned_by_llm: Whether a model plans the session (a new constraint then needs one).
    """
    if not budget.spent:
        return None
    ruled = rule_verdict(changes, steps)
    if needs_plan_change(ruled, changes, planned_by_llm=planned_by_llm):
        return escalate(budget)
    # the rules stand in for the decision agent here too: say so without "no LLM configured"
    rule = ruled.choice.reasoning.removeprefix(f"{RULE}: ")
    reasoning = f"{budget.note}, decided by the rule policy without a re-plan: {rule}"
    ruled.choice = ruled.choice.model_copy(update={"reasoning": reasoning})
    return ruled
