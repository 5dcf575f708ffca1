"""The planner's terse reply: one array per step instead of one object.

A first plan is the longest reply a session waits for, and a model's reply costs time per
output token (~20 ms at 50 tokens/s). Object steps repeat every key and a title
(``{"id":"a","title":"...","tool":"qa.capital_of","params":{...},"dependencies":[]}``, ~40
tokens); an array step says the same in about half::

    {"steps": [
      ["a", "qa.capital_of", {"subject": "France"}, []],
      ["b", "qa.population_of", {"subject": "{{a.output.value}}"}, ["a"]],
      ["r", "agent.react", {"tools": ["qa.capital_of"]}, ["b"], {"instruction": "..."}]
    ]}

``[id, tool, params, dependencies]`` plus, optionally, an object of the other step fields
(``instruction``, ``critical``, ``expect``, ``fallback``, ``title``, ...). The goal is not
repeated: the session has it. Object steps (the full plan schema) are accepted too, so a
model that answers in the long form still plans. The steps then go through the same
:class:`planner.plan.Plan` model and :func:`planner.validation.validate_plan` as any plan,
and a malformed step goes back to the model with its reason, like any invalid plan.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import PlanValidationError
from planner.plan import Plan

POSITIONS = ("id", "tool", "params", "dependencies")


class CompactPlan(BaseModel):
    """The planner's answer: steps as arrays (or objects); any ``goal`` is ignored."""

    model_config = ConfigDict(extra="ignore")

    steps: list[list[Any] | dict[str, Any]] = Field(min_length=1)

    def to_plan(self, goal: str, constraints: list[str]) -> Plan:
        """The plan these steps make for ``goal``.

        Raises:
            PlanValidationError: a step is neither a well-formed array nor a step object.
        """
        steps = [step_object(n, raw) for n, raw in enumerate(self.steps, start=1)]
        try:
            return Plan(goal=goal, steps=steps, constraints=constraints)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"])
            raise PlanValidationError(f"{where}: {error['msg']}") from None


def step_object(number: int, raw: list[Any] | dict[str, Any]) -> dict[str, Any]:
    """Step ``number`` (1-based) as a step object.

    Raises:
        PlanValidationError: an array of the wrong shape, naming the step and the fix.
    """
    if isinstance(raw, dict):
        return raw
    if not 4 <= len(raw) <= 5 or (len(raw) == 5 and not isinstance(raw[4], dict)):
        raise PlanValidationError(
            f"step {number}: write it as [id, tool, params, dependencies] with an optional "
            f"object of other fields last, not an array of {len(raw)} item(s)"
        )
    step = dict(zip(POSITIONS, raw[:4], strict=True))
    if len(raw) == 5:
        extra = {k: v for k, v in raw[4].items() if k not in POSITIONS}
        step.update(extra)
    return step
