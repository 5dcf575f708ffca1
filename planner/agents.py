"""The LLM agents of the planning loop: the planner / re-planner and the decision agent.

Every answer goes through two loops. The chat client repairs answers that are not JSON or
do not fit the schema; here, a plan that breaks a plan rule (cycle, unknown tool, bad params,
bad reference, redefined completed step) goes back to the model with the exact validation
error, at most ``max_repairs`` times. A re-plan that repeats one that already failed
(same fingerprint) is sent back once with that fact, then refused. A re-plan with no step
(``{"steps": []}``) is a valid answer, "nothing to add": it is returned as such, never
merged (an empty merge may leave no plan at all) nor sent back for repair.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar, cast

from pydantic import BaseModel, ValidationError

from planloop.core.errors import LLMResponseError, PlanValidationError, RepeatedPlanError
from planloop.core.tools import ToolRegistry
from planloop.planner.answer_validation import validate_answer
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.decision import FullReplan, ReplanDecision, SubGraph
from planloop.planner.early_steps import EarlySteps, keep_installed
from planloop.planner.llm import ChatModel, Role, StreamingChatModel, Usage
from planloop.planner.merge import merge_remaining, orphans, replace_remaining
from planloop.planner.merge_validation import validate_remaining_merge
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_stream import StepStream
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
        messages = self._plan_messages(goal, constraints, lessons)

        def check(answer: CompactPlan) -> Plan:
            plan = answer.to_plan(goal, list(constraints))
            validate_plan(plan, self.tools)
            return plan

        return self._ask(Role.PLANNER, messages, CompactPlan, check, fingerprints=lambda _: [])

    def plan_streamed(
        self,
        goal: str,
        constraints: Sequence[str],
        lessons: Sequence[str],
        on_plan: Callable[[Plan], None],
    ) -> tuple[Plan, list[Usage]]:
        """:meth:`plan` with the reply streamed: ``on_plan`` gets the growing valid prefix
        of the plan each time a step of it is whole (early dispatch).

        A step is handed over once it is whole, fits the step schema, calls a known tool
        with valid params and depends only on steps before it; the first that does not
        stops the early steps (the rest waits for the whole reply). The whole reply is then
        checked as :meth:`plan` checks it: when valid, the plan returned is the one
        :meth:`plan` would return for that reply (the steps handed over are its first
        steps). When not, it goes back to the model with its error, like any unusable
        answer, and the repaired plan keeps the steps already handed over unchanged
        (they may be running): see :meth:`plan_rest`.

        Raises:
            PlanValidationError: still invalid after ``max_repairs`` repairs.
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        streaming = cast("StreamingChatModel", self.chat)  # the caller checked streams_plans
        messages = self._plan_messages(goal, constraints, lessons)
        reader = StepStream()
        early = EarlySteps(goal, list(constraints), self.tools)

        def on_text(piece: str) -> None:
            grown = False
            for raw in reader.feed(piece):
                grown = early.accept(raw) or grown
            if grown and early.plan is not None:
                on_plan(early.plan)

        raw, usage = streaming.stream_text(Role.PLANNER, messages, CompactPlan, on_text)
        if reader.stopped or early.stopped:
            logger.info(
                "planner steps dispatched early: %d (then: %s)",
                early.count,
                reader.stopped or early.stopped,
            )
        try:
            plan = validate_answer(raw, CompactPlan).to_plan(goal, list(constraints))
            validate_plan(plan, self.tools)
            installed = early.plan.steps if early.plan is not None else []
            return keep_installed(plan, installed, self.tools), [usage]
        except (LLMResponseError, PlanValidationError) as exc:
            error = exc
        logger.info("streamed plan unusable, repairing it: %s", error)
        if isinstance(error, PlanValidationError) and self.max_repairs == 0:
            raise PlanValidationError(
                f"the planner's plan is invalid and no repair is allowed: {error}",
                step_id=error.step_id,
            ) from error
        installed = early.plan.steps if early.plan is not None else []
        chat_so_far = [
            *messages,
            {"role": "assistant", "content": raw},
            {
                "role": "user",
                "content": f"Your answer cannot be used: {error}\n"
                + _frozen_note(installed)
                + "Reply with the corrected JSON only: no prose, no code fences.",
            },
        ]
        spent = 1 if isinstance(error, PlanValidationError) else 0
        rest, usages = replace(self, max_repairs=self.max_repairs - spent).plan_rest(
            goal, constraints, installed, messages=chat_so_far
        )
        return rest, [usage, *usages]

    def plan_rest(
        self,
        goal: str,
        constraints: Sequence[str],
        installed: Sequence[Step],
        *,
        lessons: Sequence[str] = (),
        messages: list[dict[str, str]] | None = None,
    ) -> tuple[Plan, list[Usage]]:
        """A first plan that keeps ``installed`` (steps of it already running) unchanged.

        For a streamed plan whose reply ended unusable (``messages``: the chat with the
        error), and for a session taken over while its first plan was still streaming
        (``messages`` None: the planner prompt again, told which steps run already). An
        answer that redefines an installed step goes back to the model; installed steps
        it leaves out are kept.

        Raises:
            PlanValidationError: still invalid after ``max_repairs`` repairs.
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        if messages is None:
            messages = self._plan_messages(goal, constraints, lessons)
            if installed:
                messages.append({"role": "user", "content": _frozen_note(installed)})

        def check(answer: CompactPlan) -> Plan:
            plan = answer.to_plan(goal, list(constraints))
            return keep_installed(plan, installed, self.tools)

        return self._ask(Role.PLANNER, messages, CompactPlan, check, fingerprints=lambda _: [])

    def _plan_messages(
        self, goal: str, constraints: Sequence[str], lessons: Sequence[str]
    ) -> list[dict[str, str]]:
        return render_prompt(
            "planner",
            goal=goal,
            constraints=bullets(constraints),
            lessons=bullets(lessons),
            catalogue=tool_catalogue(self.tools),
        )

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
            The sub-graph (its merge validated; empty when the model has nothing to add)
            and the usage of every call.

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
            if not answer.steps:
                return answer  # nothing to add: the caller drops the removed steps
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
    ) -> tuple[Plan | None, list[Usage]]:
        """A new plan for everything not completed; completed steps stay as context.

        Returns:
            The merged plan (completed steps, then the new ones: what
            :func:`replace_remaining` gives), or None when the model proposed no step
            ("nothing to add"), and the usage of every call.

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

        def merge(answer: FullReplan) -> Plan:
            return replace_remaining(base, done, Plan(goal=base.goal, steps=answer.steps))

        def check(answer: FullReplan) -> Plan | None:
            if not answer.steps:
                return None  # nothing to add: the caller ends with what the session has
            merged = merge(answer)
            validate_plan(merged, self.tools, completed=done)
            validate_merge(current, merged, done)
            return merged

        def prints(answer: FullReplan) -> list[str]:
            return _fingerprints(answer.steps, lambda: merge(answer))

        return self._ask(
            Role.REPLANNER, messages, FullReplan, check, prints, set(failed_fingerprints)
        )

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
                    return _checked(check, answer), usages
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


def _checked(check: Callable[[A], R], answer: A) -> R:
    """``check(answer)``; a plan it builds that pydantic refuses (say, a merged plan past a
    limit) is a plan error like the others: sent back for repair, never a crash."""
    try:
        return check(answer)
    except ValidationError as invalid:
        raise PlanValidationError(_first_error(invalid)) from invalid


def _first_error(invalid: ValidationError) -> str:
    """The first problem pydantic found in a plan built from an answer, for the model."""
    first = invalid.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"the resulting plan is invalid{' at ' + where if where else ''}: {first['msg']}"


def _frozen_note(installed: Sequence[Step]) -> str:
    """Tells the model which steps run already and must stay as they are."""
    if not installed:
        return ""
    steps = ", ".join(
        json.dumps([s.id, s.tool, s.params, s.dependencies], separators=(",", ":"))
        for s in installed
    )
    return (
        f"These steps of your plan are already running and must stay exactly as they are "
        f"(repeat them unchanged or leave them out): {steps}\n"
    )


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
