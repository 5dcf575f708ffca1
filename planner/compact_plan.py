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
(``instruction``, ``critical``, ``expect``, ``fallback``, ``title``, ...). A step whose only
dependencies are the steps its params reference may leave them out: ``[id, tool, params]``
depends on exactly the referenced steps (a reference already requires the dependency).
The goal is not repeated: the session has it. Object steps (the full plan schema) are
accepted too, so a model that answers in the long form still plans. The steps then go
through the same :class:`planner.plan.Plan` model and
:func:`planner.validation.validate_plan` as any plan, and a malformed step goes back to the
model with its reason (a schema error, through the client's repair loop, as for the long
form), like any invalid plan.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planloop.planner.plan import Plan, Step
from planloop.planner.references import find_references

POSITIONS = ("id", "tool", "params", "dependencies")


class CompactPlan(BaseModel):
    """The planner's answer: steps as arrays (or objects); any ``goal`` is ignored.

    Array steps become step objects before the fields are validated, so a malformed step
    is a schema error that the client's repair loop sends back, as for the long form.
    """

    model_config = ConfigDict(extra="ignore")

    steps: list[Step] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _arrays_to_objects(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("steps"), list):
            steps = [step_object(n, raw) for n, raw in enumerate(data["steps"], start=1)]
            return {**data, "steps": steps}
        return data

    def to_plan(self, goal: str, constraints: list[str]) -> Plan:
        """The plan these steps make for ``goal``."""
        return Plan(goal=goal, steps=self.steps, constraints=constraints)


def step_object(number: int, raw: Any) -> Any:
    """Step ``number`` (1-based) as a step object (anything but an array is left as is).

    Raises:
        ValueError: an array of the wrong shape, naming the step and the fix.
    """
    if not isinstance(raw, list):
        return raw
    if len(raw) == 3 and isinstance(raw[2], dict):  # dependencies: what params reference
        raw = [*raw, sorted(find_references(raw[2]))]
    if not 4 <= len(raw) <= 5 or (len(raw) == 5 and not isinstance(raw[4], dict)):
        raise ValueError(
            f"step {number}: write it as [id, tool, params, dependencies] with an optional "
            f"object of other fields last, not an array of {len(raw)} item(s)"
        )
    step = dict(zip(POSITIONS, raw[:4], strict=True))
    if len(raw) == 5:
        step.update({k: v for k, v in raw[4].items() if k not in POSITIONS})
    return step
