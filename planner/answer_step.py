"""Answer steps: a plan may end with a step that states the session's answer itself.

An answer step is a step whose ``tool`` is the reserved name :data:`ANSWER_TOOL`. Its
``params`` fit :class:`AnswerParams`: the answer's ``text`` and, optionally, its structured
``data``; both may reference other steps' outputs (resolved at dispatch like any params)::

    - id: answer
      tool: agent.answer
      params:
        text: "SKU12345 has {{stock.output.available}} units in stock"
        data: {available: "{{stock.output.available}}"}
      dependencies: [stock]

A worker completes it with its resolved params as output, and that output becomes the
session's answer: the summarizer is not asked, unless the data breaks the submitter's
``answer_schema`` (then the summarizer repairs it from the results). Nothing may depend on
an answer step, and a plan has at most one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planloop.planner.plan import Step

ANSWER_TOOL = "agent.answer"  # reserved: no registered tool may take this name


class AnswerParams(BaseModel):
    """The params (and the output) of an answer step."""

    # A text that is one reference ("{{stock.output.available}}") resolves to a number.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    text: str = Field(min_length=1, description="The answer to the goal, for people.")
    data: Any = Field(None, description="The structured answer (fits the answer schema).")


def is_answer_step(step: Step) -> bool:
    """Whether ``step`` states the session's answer."""
    return step.tool == ANSWER_TOOL


def answer_step_problem(step: Step) -> str | None:
    """Why an answer step's params do not fit :class:`AnswerParams`, or None."""
    try:
        AnswerParams.model_validate(step.params)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"param {where!r}: {error['msg']}" if where else f"params: {error['msg']}"
    return None


def answer_plan_problems(steps: Sequence[Step]) -> list[tuple[str, str]]:
    """(step id, problem) for answer steps placed wrongly: a second one, or one that another
    step depends on (the answer ends the plan)."""
    answers = [s.id for s in steps if is_answer_step(s)]
    problems = [(extra, "a plan has at most one answer step") for extra in answers[1:]]
    wanted = set(answers)
    for step in steps:
        for dep in step.dependencies:
            if dep in wanted:
                problems.append(
                    (step.id, f"depends on answer step {dep!r}: an answer ends the plan")
                )
    return problems
