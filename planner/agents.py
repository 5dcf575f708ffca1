"""The LLM agents of the planning loop: the planner / re-planner and the decision agent.

Every answer goes through two loops. The chat client repairs answers that are not JSON or
do not fit the schema; here, a plan that breaks a plan rule (cycle, unknown tool, bad params,
bad reference, redefined completed step) goes back to the model with the exact validation
error, at most ``max_repairs`` times. A re-plan that repeats one that already failed
(same fingerprint) is sent back once with that fact, then refused.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from planloop.core.errors import PlanValidationError, RepeatedPlanError
from planloop.core.tools import ToolRegistry
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.decision import ReplanDecision, SubGraph
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.merge import merge_remaining, orphans, replace_remaining
from planloop.planner.merge_validation import validate_remaining_merge
from planloop.planner.plan import Plan, Step
from planloop.planner.prompting import bullets, plan_outline, render_prompt, tool_catalogue
from planloop.planner.situation import Situation, render_situation
from planloop.planner.validation import validate_merge, validate_plan

logger = logging.getLogger(__name__)

A = TypeVar("A", bound=BaseModel)
R = TypeVar("R")

# Statuses of steps an incremental re-plan removes (with their orphans) even when not named.
DEAD_STATUSES = frozenset({"failed", "cancelled", "skipped", "interrupted"})
# Size budgets of the situation report, characters. An incremental re-plan keeps the plan's
# shape and needs less history than a full one, which rewrites everything that is left.
INCREMENTAL_SITUATION_CHARS = 3000
FULL_SITUATION_CHARS = 8000
# Size budget of the situation report inside decider prompts, characters.
DECIDER_SITUATION_CHARS = 6000


@dataclass
class Planner:
    """Writes plans, incremental sub-graphs and full re-plans, each one validated.

    Attributes:
        chat: The model.
        tools: The tools plans may call; their sensitive fields are masked in prompts.
        max_repairs: Times an invalid plan goes back to the model with the error.
    """

    chat: ChatModel
    tools: ToolRegistry
    max_repairs: int = 2

    def plan(
        self, goal: str, constraints: Sequence[str] = (), lessons: Sequence[str] = ()
    ) -> tuple[Plan, list[Usage]]:
        """A first plan for ``goal``.

        Args:
            goal: What the user wants.
            constraints: Rules the plan must respect.
            lessons: Lessons from earlier sessions worth knowing.

        Returns:
            The valid plan (goal and constraints as given) and the usage of every call.

        Raises:
            PlanValidationError: still invalid after ``max_repairs`` repairs.
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        messages = render_prompt(
            "planner",
            goal=goal,
            constraints=bullets(constraints),
            lessons=bullets(lessons),
            catalogue=tool_catalogue(self.tools),
        )

        def check(answer: CompactPlan) -> Plan:
            plan = answer.to_plan(goal, list(constraints))
            validate_plan(plan, self.tools)
            return plan

        return self._ask(Role.PLANNER, messages, CompactPlan, check, fingerprints=lambda _: [])

    def replan_remaining(
        self,
        situation: Situation,
        current: Plan,
        completed: Collection[str],
        *,
        failed_fingerprints: Collection[str] = (),
        cancel: Collection[str] = (),
        lessons: Sequence[str] = (),
    ) -> tuple[SubGraph, list[Usage]]:
        """A sub-graph that replaces the steps an incremental re-plan removes.

        The removed steps are ``cancel``, the steps the situation shows as failed,
        cancelled, skipped or interrupted, and every step that depends on them; the answer
        is checked as :func:`merge_remaining` with the same removals would merge it, so
        the caller should merge with the same ``cancel``.

        Returns:
            The sub-graph (its merge validated) and the usage of every call.

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

        def check(answer: SubGraph) -> SubGraph:
            merged = merge_remaining(current, done, removed, answer.steps)
            # the plan in force is valid: check what the sub-graph changed, not every step
            validate_remaining_merge(current, merged, answer.steps, self.tools, completed=done)
            return answer

        def prints(answer: SubGraph) -> list[str]:
            return _fingerprints(
                answer.steps, lambda: merge_remaining(current, done, removed, answer.steps)
            )

        return self._ask(
            Role.REPLANNER, messages, SubGraph, check, prints, set(failed_fingerprints)
        )

    def replan_full(
        self,
        situation: Situation,
        current: Plan,
        completed: Collection[str],
        *,
        failed_fingerprints: Collection[str] = (),
        lessons: Sequence[str] = (),
    ) -> tuple[Plan, list[Usage]]:
        """A new plan for everything not completed; completed steps stay as context.

        Returns:
            The merged plan (completed steps, then the new ones: what
            :func:`replace_remaining` gives) and the usage of every call.

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

        def merge(answer: Plan) -> Plan:
            return replace_remaining(base, done, answer.model_copy(update={"constraints": []}))

        def check(answer: Plan) -> Plan:
            merged = merge(answer)
            validate_plan(merged, self.tools, completed=done)
            validate_merge(current, merged, done)
            return merged

        def prints(answer: Plan) -> list[str]:
            return _fingerprints(answer.steps, lambda: merge(answer))

        return self._ask(Role.REPLANNER, messages, Plan, check, prints, set(failed_fingerprints))

    # --- helpers --------------------------------------------------------------------------

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

    def _ask(
        self,
        role: Role,
        messages: list[dict[str, str]],
        schema: type[A],
        check: Callable[[A], R],
        fingerprints: Callable[[A], list[str]],
        failed: Collection[str] = (),
    ) -> tuple[R, list[Usage]]:
        """Ask until ``check`` accepts an answer; send each rejection back with its reason."""
        chat = list(messages)
        usages: list[Usage] = []
        repairs = repeats = 0
        while True:
            answer, usage = self.chat.complete_json(role, chat, schema)
            usages.append(usage)
            repeated = next((fp for fp in fingerprints(answer) if fp in failed), None)
            if repeated is not None:
                repeats += 1
                if repeats > 1:
                    raise RepeatedPlanError(
                        f"the {role} proposed a plan that already failed twice "
                        f"(fingerprint {repeated[:12]}); counted as a failed re-plan",
                        fingerprint=repeated,
                    )
                problem = (
                    f"this plan repeats a plan that already failed (fingerprint "
                    f"{repeated[:12]}). Propose a different approach: other tools, other "
                    "params or another structure."
                )
            else:
                try:
                    return check(answer), usages
                except PlanValidationError as exc:
                    repairs += 1
                    if repairs > self.max_repairs:
                        raise PlanValidationError(
                            f"the {role}'s plan is still invalid after {self.max_repairs} "
                            f"repair(s): {exc}",
                            step_id=exc.step_id,
                        ) from exc
                    problem = f"the plan is invalid: {exc}"
            logger.info("%s answer refused: %s", role, problem)
            chat += [
                {"role": "assistant", "content": answer.model_dump_json(exclude_defaults=True)},
                {
                    "role": "user",
                    "content": f"Your answer cannot be used: {problem}\n"
                    "Reply with the corrected JSON only: no prose, no code fences.",
                },
            ]


@dataclass
class Decider:
    """The decision agent: situation report in, :class:`ReplanDecision` out.

    Attributes:
        chat: The model.
    """

    chat: ChatModel

    def decide(
        self, situation: Situation, *, sensitive: Collection[str] = ()
    ) -> tuple[ReplanDecision, Usage]:
        """What to do about the situation.

        ``steps_to_cancel`` is cleaned of ids that are not open steps of the situation, so
        the supervisor never cancels a completed or unknown step.

        Raises:
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        cancellable = [s.id for s in situation.open_steps]
        messages = render_prompt(
            "decider",
            situation=render_situation(
                situation, budget_chars=DECIDER_SITUATION_CHARS, sensitive=sensitive
            ),
            cancellable=bullets(cancellable),
            replans_left=str(situation.replans_left),
            max_replans=str(situation.max_replans),
        )
        decision, usage = self.chat.complete_json(Role.DECIDER, messages, ReplanDecision)
        wanted = list(dict.fromkeys(decision.steps_to_cancel))
        allowed = [s for s in wanted if s in cancellable]
        if allowed != decision.steps_to_cancel:
            logger.info(
                "decider named steps that cannot be cancelled: %s",
                sorted(set(wanted) - set(allowed)),
            )
            decision = decision.model_copy(update={"steps_to_cancel": allowed})
        return decision, usage


def _statuses(situation: Situation) -> dict[str, str]:
    return {s.id: s.status for s in situation.steps}


def _fingerprints(steps: Sequence[Step], merged: Callable[[], Plan]) -> list[str]:
    """Fingerprints a proposal is known by: its own steps', and the merged plan's."""
    if not steps:
        return []
    prints = [Plan(steps=list(steps)).fingerprint()]
    # an answer that cannot be merged is refused by the check, with its own message
    with contextlib.suppress(PlanValidationError):
        prints.append(merged().fingerprint())
    return prints
