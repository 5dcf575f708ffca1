"""The steps of a streamed first plan that may run before the reply has ended.

:class:`EarlySteps` grows a valid plan one whole step at a time (the reply's order): a step
joins when it fits the step schema, calls a known tool with valid params and depends only on
steps before it (checked by what it adds, :func:`validate_remaining_merge`, O(k)). The first
step that does not join stops the early steps: from there the plan waits for the whole reply.

:func:`keep_installed` is the rule for the whole plan once the reply has ended: the steps
already installed (perhaps running) are kept exactly as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from planloop.core.errors import PlanValidationError
from planloop.core.tools import ToolRegistry
from planloop.planner.compact_plan import step_object
from planloop.planner.merge import merge_remaining
from planloop.planner.merge_validation import validate_remaining_merge
from planloop.planner.plan import Plan, Step
from planloop.planner.validation import validate_plan

log = logging.getLogger(__name__)


class EarlySteps:
    """The valid prefix of a streamed plan.

    Attributes:
        plan: The steps accepted so far as a plan (goal and constraints as given), or None.
        stopped: Why no more steps are accepted early, or empty.
    """

    def __init__(self, goal: str, constraints: list[str], tools: ToolRegistry) -> None:
        self.goal, self.constraints, self.tools = goal, constraints, tools
        self.plan: Plan | None = None
        self.stopped = ""
        self._seen = 0

    @property
    def count(self) -> int:
        """Steps accepted so far."""
        return len(self.plan.steps) if self.plan is not None else 0

    def accept(self, raw: Any) -> bool:
        """Add the reply's next step (an array as read); whether it joined."""
        self._seen += 1
        if self.stopped:
            return False
        try:
            step = Step.model_validate(step_object(self._seen, raw))
            if self.plan is None:
                grown = Plan(goal=self.goal, steps=[step], constraints=self.constraints)
                validate_plan(grown, self.tools)
            else:
                grown = merge_remaining(self.plan, (), (), [step])
                if len(grown.steps) != len(self.plan.steps) + 1:  # a repeated id
                    raise PlanValidationError(f"step id {step.id!r} repeated", step_id=step.id)
                validate_remaining_merge(self.plan, grown, [step], self.tools, completed=())
        except (ValueError, ValidationError, PlanValidationError) as exc:
            self.stopped = f"step {self._seen}: {exc}"
            log.info("early steps stop at step %d: %s", self._seen, exc)
            return False
        self.plan = grown
        return True


def keep_installed(plan: Plan, installed: Sequence[Step], tools: ToolRegistry) -> Plan:
    """``plan`` with the ``installed`` steps first and unchanged, validated.

    Raises:
        PlanValidationError: ``plan`` redefines an installed step (it may be running), or
            the merged plan breaks a plan rule.
    """
    if not installed:
        validate_plan(plan, tools)
        return plan
    kept = {s.id: s for s in installed}
    for step in plan.steps:
        if step.id in kept and step != kept[step.id]:
            raise PlanValidationError(
                f"step {step.id!r} is already running as it was first written; keep it "
                "unchanged (or leave it out) and give the other steps",
                step_id=step.id,
            )
    rest = [s for s in plan.steps if s.id not in kept]
    merged = plan.model_copy(update={"steps": [*installed, *rest]})
    validate_plan(merged, tools)
    return merged
