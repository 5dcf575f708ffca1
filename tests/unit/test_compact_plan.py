"""The planner's terse reply: array steps (and object steps) into a validated plan."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planloop.planner.compact_plan import CompactPlan

TERSE = """{"steps":[
["a","ecommerce.inventory",{"product_id":"SKU1"},[]],
["b","ecommerce.reviews",{"product_id":"{{a.output.product_id}}"},["a"],{"critical":true,"id":"x"}]
]}"""


def test_array_steps_make_the_same_plan_as_object_steps() -> None:
    plan = CompactPlan.model_validate_json(TERSE).to_plan("the goal", ["be quick"])

    assert (plan.goal, plan.constraints) == ("the goal", ["be quick"])
    a, b = plan.steps
    assert (a.id, a.tool, a.params, a.dependencies) == (
        "a",
        "ecommerce.inventory",
        {"product_id": "SKU1"},
        [],
    )
    assert (b.id, b.dependencies, b.critical) == ("b", ["a"], True)  # extras cannot rename


def test_a_step_without_dependencies_depends_on_what_its_params_reference() -> None:
    reply = {
        "steps": [
            ["a", "ecommerce.inventory", {"product_id": "S"}],
            ["b", "ecommerce.reviews", {"product_id": "{{a.output.product_id}}"}],
        ]
    }
    a, b = CompactPlan.model_validate(reply).to_plan("g", []).steps
    assert (a.dependencies, b.dependencies) == ([], ["a"])


def test_object_steps_and_a_goal_are_still_accepted() -> None:
    reply = {
        "goal": "ignored: the session has it",
        "steps": [{"id": "a", "tool": "ecommerce.inventory", "params": {"product_id": "S"}}],
    }
    plan = CompactPlan.model_validate(reply).to_plan("g", [])
    assert (plan.goal, plan.steps[0].id) == ("g", "a")


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([["a", "t.x"]], "step 1: write it as [id, tool, params, dependencies]"),
        ([["a", "t.x", {}, [], "critical"]], "an optional object of other fields last"),
        ([["a", "t.x", "not params", []]], "steps.0.params"),
    ],
)
def test_a_malformed_step_is_a_schema_error_the_model_can_repair(
    steps: list[object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[")):
        CompactPlan.model_validate({"steps": steps})
