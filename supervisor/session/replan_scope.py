"""The scope rule: re-plan only what a failure breaks, or the whole rest.

Incremental re-planning (REPLAN_REMAINING) is cheap and keeps the plan's shape; it misses
hidden conflicts when much of the plan hangs off the failed step. So the rule
escalates to a full re-plan when what is downstream of the failure is deep or large, and
from the second re-plan on (a plan that needed two repairs has a structural problem):

=================================  ====================================================
rule                               picks REPLAN_FULL when
=================================  ====================================================
re-plans so far                    ``replans >= FULL_FROM_REPLAN`` (2)
depth of the open downstream       more than ``MAX_DEPTH`` (2) levels below the failure
size of the open downstream        more than ``MAX_DOWNSTREAM`` (3) steps
share of the plan downstream       more than ``MAX_SHARE`` (half) of the plan's steps
=================================  ====================================================

Otherwise REPLAN_REMAINING. "Open" steps are those not completed: completed work is frozen
by either kind of re-plan, so it weighs nothing. Pure: no Redis, no LLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from planloop.core.models import StepState, StepStatus
from planloop.planner.decision import ReplanAction
from planloop.planner.plan import Plan

FULL_FROM_REPLAN = 2  # the re-plan count from which every re-plan is a full one
MAX_DEPTH = 2  # levels of open steps below the failed one an incremental re-plan handles
MAX_DOWNSTREAM = 3  # open steps below the failed one an incremental re-plan handles
MAX_SHARE = 0.5  # share of the plan's steps below the failed one an incremental one handles


@dataclass(frozen=True)
class ScopePick:
    """The rule's pick for one failure, with the figures behind it (shown to the decider)."""

    action: ReplanAction  # REPLAN_FULL or REPLAN_REMAINING
    step_id: str
    downstream: int  # open steps that depend on the failed one, directly or not
    depth: int  # levels of open steps below the failed one (0: nothing depends on it)
    plan_steps: int
    replans: int

    @property
    def reason(self) -> str:
        """One line a user (and the decision agent) can read."""
        figures = (
            f"{self.downstream} of {self.plan_steps} steps downstream of {self.step_id}, "
            f"{self.depth} level{'s' if self.depth != 1 else ''} deep, "
            f"{self.replans} re-plan{'s' if self.replans != 1 else ''} so far"
        )
        return f"{self.action.value} ({figures})"


def pick_replan_scope(
    plan: Plan, failed_step: str, states: Mapping[str, StepState], replans: int
) -> ScopePick:
    """Full or incremental re-planning after ``failed_step`` failed, by the table above.

    Args:
        plan: The plan version the failure happened in.
        failed_step: The id of the step that failed (a step of ``plan``).
        states: Step states by id; a step without one counts as open.
        replans: Re-plans the session made so far.
    """
    dependents: dict[str, list[str]] = {}
    for step in plan.steps:
        for dep in step.dependencies:
            dependents.setdefault(dep, []).append(step.id)

    def is_open(step_id: str) -> bool:
        state = states.get(step_id)
        return state is None or state.status != StepStatus.COMPLETED

    depth_of: dict[str, int] = {}

    def depth(step_id: str) -> int:
        # levels of open steps below step_id; a plan is acyclic, so this ends
        if step_id not in depth_of:
            below = [depth(c) + 1 for c in dependents.get(step_id, ()) if is_open(c)]
            depth_of[step_id] = max(below, default=0)
        return depth_of[step_id]

    downstream: set[str] = set()
    frontier = [c for c in dependents.get(failed_step, ()) if is_open(c)]
    while frontier:
        step_id = frontier.pop()
        if step_id not in downstream:
            downstream.add(step_id)
            frontier += [c for c in dependents.get(step_id, ()) if is_open(c)]
    size, levels = len(downstream), depth(failed_step)
    full = (
        replans >= FULL_FROM_REPLAN
        or levels > MAX_DEPTH
        or size > MAX_DOWNSTREAM
        or size > MAX_SHARE * len(plan.steps)
    )
    action = ReplanAction.REPLAN_FULL if full else ReplanAction.REPLAN_REMAINING
    return ScopePick(action, failed_step, size, levels, len(plan.steps), replans)


def pick_for_failures(
    plan: Plan, failed_steps: Iterable[str], states: Mapping[str, StepState], replans: int
) -> ScopePick | None:
    """The pick for several failures at once: the first that calls for a full re-plan, else
    the first one's; None when no step of ``plan`` failed."""
    ids = set(plan.step_ids)
    picks = [
        pick_replan_scope(plan, step_id, states, replans)
        for step_id in dict.fromkeys(failed_steps)
        if step_id in ids
    ]
    full = [p for p in picks if p.action == ReplanAction.REPLAN_FULL]
    chosen = full or picks
    return chosen[0] if chosen else None
