"""Answer steps: where a plan may state its answer, and what their params must be."""

from __future__ import annotations

import pytest

from planloop.core.tools import load_tools
from planloop.planner.answer_step import ANSWER_TOOL, AnswerParams
from planloop.planner.plan import Plan, Step
from planloop.planner.validation import all_errors, validate_plan

TOOLS = load_tools()


def echo(step_id: str, *deps: str) -> Step:
    return Step(
        id=step_id, tool="ecommerce.inventory", params={"product_id": "S1"}, dependencies=list(deps)
    )


def answer(step_id: str = "answer", *deps: str, **params: object) -> Step:
    params = params or {
        "text": "n is {{a.output.available}}",
        "data": {"n": "{{a.output.available}}"},
    }
    return Step(id=step_id, tool=ANSWER_TOOL, params=dict(params), dependencies=list(deps))


def test_a_plan_may_end_with_an_answer_step() -> None:
    validate_plan(Plan(steps=[echo("a"), answer("answer", "a")]), TOOLS)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([echo("a"), answer("answer", "a", data={"n": 1})], "param 'text': Field required"),
        ([echo("a"), answer("answer", "a", text="t", extra=1)], "param 'extra'"),
        (
            [echo("a"), answer("answer", "a"), answer("again", "a")],
            "a plan has at most one answer step",
        ),
        (
            [echo("a"), answer("answer", "a"), echo("late", "answer")],
            "depends on answer step 'answer': an answer ends the plan",
        ),
    ],
)
def test_an_answer_step_out_of_place_or_malformed_is_refused(
    steps: list[Step], message: str
) -> None:
    errors = [str(e) for e in all_errors(Plan(steps=steps), TOOLS)]
    assert any(message in e for e in errors), errors


def test_a_text_that_is_one_reference_may_resolve_to_a_number() -> None:
    assert AnswerParams.model_validate({"text": 42}).text == "42"
