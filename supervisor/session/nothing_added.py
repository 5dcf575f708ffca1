"""A re-plan that added nothing: which steps it drops, and whether the session goes on.

An empty sub-graph (or a full plan with no step, or one that only repeats completed steps)
is a valid answer, "nothing to add". The decision that asked for it still holds: the steps
it named and the orphans of the removed ones are dropped (cancelled), and the session goes
on with what is left. What the re-planner left without a replacement is judged as the rule
policy judges a final failure (policy.py): a critical step that failed for good, with no
fallback in its place, fails the session (with compensation, as any failed session), so a
session never ends "completed" around a failed critical step nobody replaced.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from planloop.core.models import StepState, StepStatus
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.merge import orphans
from planloop.planner.plan import Plan
from planloop.supervisor.session.state import has_ended
from planloop.supervisor.session.verdict import Verdict

NOTHING_ADDED = "the re-planner added nothing"
DROPPED_NOTE = f"dropped: {NOTHING_ADDED}"
BROKEN = (StepStatus.FAILED, StepStatus.INTERRUPTED)


def dropped_steps(
    plan: Plan, states: Mapping[str, StepState], removed: Collection[str]
) -> list[str]:
    """Steps that have not ended among ``removed`` (named by the decision, or failed) and
    the steps that depend on them: what a re-plan would have replaced, now cancelled."""
    completed = {i for i, st in states.items() if st.status == StepStatus.COMPLETED}
    gone = (set(removed) - completed) | orphans(plan, set(removed) - completed, completed)
    return sorted(i for i in gone if i in states and not has_ended(states[i]))


def unreplaced_critical(
    plan: Plan, states: Mapping[str, StepState], fallbacks: Mapping[str, list[str]]
) -> list[str]:
    """Critical steps of ``plan`` that failed for good and that no fallback took over."""
    return [
        s.id
        for s in plan.steps
        if s.critical
        and s.id in states
        and states[s.id].status in BROKEN
        and not fallbacks.get(s.id)
    ]


def nothing_added_verdict(asked: ReplanDecision, critical: list[str]) -> Verdict | None:
    """The rule policy's verdict after ``asked`` (a re-plan) added nothing: the session
    fails when a critical step is left failed (``critical``, from
    :func:`unreplaced_critical`); None when it goes on with what is left."""
    if not critical:
        return None
    named = ", ".join(critical)
    text = (
        f"rule policy: critical step {named} failed and {NOTHING_ADDED} in its place "
        f"(asked for by {asked.action.value})"
    )
    decision = ReplanDecision(action=ReplanAction.ABORT, reasoning=text, confidence=1.0)
    return Verdict(decision, "rule", fail_session=True)
