"""The planner agent: a goal and the tools in, a first plan out, validated.

A first plan is asked for whole (:meth:`Planner.plan`) or streamed, its steps handed over
while the reply is written (:meth:`Planner.plan_streamed`); a plan some of whose steps run
already is finished around them (:meth:`Planner.plan_rest`). Invalid answers are repaired
in the loop of planner/plan_repairs.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from planloop.core.errors import LLMResponseError, PlanValidationError
from planloop.core.tools import ToolRegistry
from planloop.planner.answer_validation import validate_answer
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.early_steps import EarlySteps, keep_installed
from planloop.planner.llm import ChatModel, Role, StreamingChatModel, Usage
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_repairs import Proposal, ask_until_accepted, judged
from planloop.planner.plan_stream import StepStream
from planloop.planner.prompting import bullets, render_prompt, tool_catalogue
from planloop.planner.validation import validate_plan

logger = logging.getLogger(__name__)


@dataclass
class Planner:
    """Writes first plans, each one validated.

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

        def build(answer: CompactPlan) -> Plan:
            plan = answer.to_plan(goal, list(constraints))
            validate_plan(plan, self.tools)
            return plan

        return self._ask(self._plan_messages(goal, constraints, lessons), build)

    def plan_streamed(
        self,
        goal: str,
        constraints: Sequence[str],
        lessons: Sequence[str],
        on_plan: Callable[[Plan], None],
    ) -> tuple[Plan, list[Usage]]:
        """:meth:`plan` with the reply streamed: ``on_plan`` gets the growing valid prefix
        of the plan each time a step of it is whole while the steps array is still open
        (early dispatch).

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
            # Once the steps array has closed, the whole plan follows at once (a reply that
            # came whole, from an endpoint that does not stream, is one piece): no prefix.
            if grown and early.plan is not None and not reader.ended:
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

        def build(answer: CompactPlan) -> Plan:
            plan = answer.to_plan(goal, list(constraints))
            return keep_installed(plan, installed, self.tools)

        return self._ask(messages, build)

    def _ask(
        self, messages: list[dict[str, str]], build: Callable[[CompactPlan], Plan]
    ) -> tuple[Plan, list[Usage]]:
        def judge(answer: CompactPlan) -> Proposal[Plan]:
            return judged(lambda: build(answer))

        return ask_until_accepted(
            self.chat, Role.PLANNER, messages, CompactPlan, judge, max_repairs=self.max_repairs
        )

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
