"""The re-planner agent: a situation report in, the next plan out, merged once and validated.

Two scopes: an incremental re-plan (:meth:`Replanner.replan_remaining`) asks for a sub-graph
that takes the place of the steps it removes; a full one (:meth:`Replanner.replan_full`) for
a new plan of everything not completed. Either way the answer is merged into the plan in
force once, and that merged plan is the one validated, fingerprinted and returned
(:class:`Replan`). A re-plan with no step (``{"steps": []}``) is a valid answer, "nothing to
add": it is returned as such, never merged (an empty merge may leave no plan at all) nor
sent back for repair.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from pydantic import BaseModel

from planloop.core.errors import PlanValidationError
from planloop.core.tools import ToolRegistry
from planloop.planner.decision import FullReplan, SubGraph
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.merge import merge_remaining, orphans, replace_remaining
from planloop.planner.merge_validation import validate_remaining_merge
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_repairs import Proposal, ask_until_accepted, merged_proposal
from planloop.planner.prompting import bullets, plan_outline, render_prompt, tool_catalogue
from planloop.planner.situation import Situation, render_situation
from planloop.planner.validation import validate_merge, validate_plan

# Statuses of steps an incremental re-plan's prompt names as removed even when not cancelled.
DEAD_STATUSES = frozenset({"failed", "cancelled", "skipped", "interrupted"})
# Size budgets of the situation report, characters. An incremental re-plan keeps the plan's
# shape and needs less history than a full one, which rewrites everything that is left.
INCREMENTAL_SITUATION_CHARS = 3000
FULL_SITUATION_CHARS = 8000

A = TypeVar("A", bound=BaseModel)


@dataclass(frozen=True)
class Replan:
    """What a re-plan gives the session.

    Attributes:
        plan: The next plan version: the plan in force with the answer merged in (the
            plan that was validated), or None when the answer adds no step that is not
            already completed ("nothing to add").
        added: Ids of the answer's steps that are not completed steps.
        usages: The usage of every call it took, repairs included.
    """

    plan: Plan | None
    added: frozenset[str]
    usages: list[Usage] = field(default_factory=list)

    def added_fingerprint(self) -> str:
        """The fingerprint of the steps the re-plan added, as they are in :attr:`plan`."""
        steps = self.plan.steps if self.plan is not None else []
        return Plan(steps=[s for s in steps if s.id in self.added]).fingerprint()


@dataclass
class Replanner:
    """Writes incremental sub-graphs and full re-plans, each merged once and validated.

    Attributes:
        chat: The model.
        tools: The tools plans may call; their sensitive fields are masked in prompts.
        max_repairs: Times an invalid plan goes back to the model with the error.
    """

    chat: ChatModel
    tools: ToolRegistry
    max_repairs: int = 2

    def replan_remaining(
        self,
        situation: Situation,
        current: Plan,
        completed: Collection[str],
        *,
        failed_fingerprints: Collection[str] = (),
        cancel: Collection[str] = (),
        lessons: Sequence[str] = (),
    ) -> Replan:
        """A sub-graph that takes the place of the steps this re-plan removes.

        The merged plan is :func:`merge_remaining` of ``current`` without ``cancel`` (and
        the steps that depend on it) and with the sub-graph. The prompt also names as
        removed the steps the situation shows as failed, cancelled, skipped or
        interrupted, and their dependents, so the model does not build on them; those
        that are not cancelled stay in the merged plan, ended as they are.

        Raises:
            PlanValidationError: still invalid after ``max_repairs`` repairs.
            RepeatedPlanError: the model proposed a failed sub-graph twice.
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        done = set(completed)
        removed = self._removals(situation, current, done, cancel)
        gone = removed | orphans(current, removed, done)
        kept = [s.id for s in current.steps if s.id not in gone and s.id not in done]
        messages = render_prompt(
            "replanner_remaining",
            situation=self._situation(situation, INCREMENTAL_SITUATION_CHARS),
            plan_outline=plan_outline(current, _statuses(situation)),
            completed=bullets(sorted(done)),
            removed=bullets(s.id for s in current.steps if s.id in gone),
            kept=bullets(kept),
            lessons=bullets(lessons),
            catalogue=tool_catalogue(self.tools, compact=True),
        )

        def check(merged: Plan, steps: Sequence[Step]) -> None:
            # the plan in force is valid: check what the sub-graph changed, not every step
            validate_remaining_merge(current, merged, steps, self.tools, completed=done)

        def judge(answer: SubGraph) -> Proposal[Replan]:
            if not answer.steps:
                return Proposal(Replan(None, frozenset()))  # nothing to add
            merged = merged_proposal(
                answer.steps,
                lambda: merge_remaining(current, done, cancel, answer.steps),
                lambda plan: check(plan, answer.steps),
            )
            return _as_replan(merged, answer.steps, done)

        return self._ask(messages, SubGraph, judge, failed_fingerprints)

    def replan_full(
        self,
        situation: Situation,
        current: Plan,
        completed: Collection[str],
        *,
        failed_fingerprints: Collection[str] = (),
        lessons: Sequence[str] = (),
    ) -> Replan:
        """A new plan for everything not completed; completed steps stay as context.

        The merged plan is :func:`replace_remaining`'s: completed steps, then the new ones,
        the constraints of the plan and of the situation.

        Raises:
            PlanValidationError: still invalid after ``max_repairs`` repairs.
            RepeatedPlanError: the model proposed a failed plan twice.
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        done = set(completed)
        messages = render_prompt(
            "replanner_full",
            situation=self._situation(situation, FULL_SITUATION_CHARS),
            plan_outline=plan_outline(current, _statuses(situation)),
            completed=bullets(sorted(done)),
            lessons=bullets(lessons),
            catalogue=tool_catalogue(self.tools),
        )
        base = Plan(
            goal=situation.goal or current.goal,
            steps=current.steps,
            constraints=list(dict.fromkeys([*current.constraints, *situation.constraints])),
        )

        def check(merged: Plan) -> None:
            validate_plan(merged, self.tools, completed=done)
            validate_merge(current, merged, done)

        def judge(answer: FullReplan) -> Proposal[Replan]:
            if not answer.steps:
                return Proposal(Replan(None, frozenset()))  # nothing to add
            new = Plan(goal=base.goal, steps=answer.steps)
            merged = merged_proposal(
                answer.steps, lambda: replace_remaining(base, done, new), check
            )
            return _as_replan(merged, answer.steps, done)

        return self._ask(messages, FullReplan, judge, failed_fingerprints)

    # --- helpers --------------------------------------------------------------------------

    def _ask(
        self,
        messages: list[dict[str, str]],
        schema: type[A],
        judge: Callable[[A], Proposal[Replan]],
        failed: Collection[str],
    ) -> Replan:
        replan, usages = ask_until_accepted(
            self.chat,
            Role.REPLANNER,
            messages,
            schema,
            judge,
            max_repairs=self.max_repairs,
            failed=set(failed),
        )
        return replace(replan, usages=usages)

    def _situation(self, situation: Situation, budget_chars: int) -> str:
        sensitive: set[str] = set()
        for spec in self.tools.specs():
            sensitive |= spec.sensitive_fields()
        return render_situation(situation, budget_chars=budget_chars, sensitive=sensitive)

    @staticmethod
    def _removals(
        situation: Situation, current: Plan, done: set[str], cancel: Collection[str]
    ) -> set[str]:
        dead = {s.id for s in situation.steps if s.status in DEAD_STATUSES}
        return ((set(cancel) | dead) & set(current.step_ids)) - done


def _as_replan(merged: Proposal[Plan], steps: Sequence[Step], done: set[str]) -> Proposal[Replan]:
    """The merged proposal as a :class:`Replan` (its plan None when it adds no step)."""
    if isinstance(merged.outcome, PlanValidationError):
        return Proposal(merged.outcome, merged.fingerprints)
    added = frozenset(s.id for s in steps) - done
    return Proposal(Replan(merged.outcome if added else None, added), merged.fingerprints)


def _statuses(situation: Situation) -> dict[str, str]:
    return {s.id: s.status for s in situation.steps}
