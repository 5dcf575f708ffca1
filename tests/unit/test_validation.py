"""Tests for plan validation: each rule, with the culprit named in the message."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from planloop.core.errors import PlanValidationError
from planloop.core.tools import ToolContext, ToolRegistry, tool
from planloop.planner.plan import Plan, Step, parse_plan
from planloop.planner.validation import all_errors, validate_merge, validate_plan


class InventoryParams(BaseModel):
    product_id: str
    warehouse: str = "main"


class ReserveParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sku: str
    qty: int = Field(ge=1)


class CancelParams(BaseModel):
    reservation_id: str


class NoParams(BaseModel):
    pass


def _noop(params: Any, ctx: ToolContext) -> dict[str, Any]:
    return {}


def make_registry() -> ToolRegistry:
    reg = ToolRegistry()
    tool("shop.inventory", description="stock", params=InventoryParams, registry=reg)(_noop)
    tool("shop.orders", description="orders", params=InventoryParams, registry=reg)(_noop)
    tool("shop.reserve", description="reserve", params=ReserveParams, registry=reg)(_noop)
    tool("shop.cancel", description="cancel", params=CancelParams, registry=reg)(_noop)
    tool("shop.noop", description="nothing", params=NoParams, registry=reg)(_noop)
    return reg


TOOLS = make_registry()


def step(step_id: str, *deps: str, tool: str = "shop.noop", **kwargs: Any) -> Step:
    return Step(id=step_id, tool=tool, dependencies=list(deps), **kwargs)


def plan(*steps: Step) -> Plan:
    return Plan(steps=list(steps))


def error_of(p: Plan, **kwargs: Any) -> PlanValidationError:
    with pytest.raises(PlanValidationError) as info:
        validate_plan(p, TOOLS, **kwargs)
    return info.value


def test_valid_plan_passes_and_has_no_errors() -> None:
    p = parse_plan(
        """
steps:
  - {id: stock, tool: shop.inventory, params: {product_id: SKU1}}
  - {id: orders, tool: shop.orders, params: {product_id: SKU1, warehouse: east}}
  - id: restock
    tool: shop.reserve
    params: {sku: SKU1, qty: "{{stock.output.shortfall}}"}
    dependencies: [stock, orders]
    compensate: {tool: shop.cancel, params: {reservation_id: "{{restock.output.id}}"}}
"""
    )
    validate_plan(p, TOOLS)
    assert all_errors(p, TOOLS) == []


def test_duplicate_id() -> None:
    err = error_of(plan(step("a"), step("b"), step("a")))
    assert str(err) == "duplicate step id 'a'"
    assert err.step_id == "a"


def test_unknown_dependency() -> None:
    err = error_of(plan(step("a"), step("b", "x")))
    assert str(err).startswith("step 'b' depends on unknown step 'x'")
    assert err.step_id == "b"


def test_unknown_dependency_suggests_close_id() -> None:
    err = error_of(plan(step("orders"), step("b", "order")))
    assert "did you mean 'orders'?" in str(err)


def test_dependency_on_completed_step_is_fine_for_replans() -> None:
    validate_plan(plan(step("b", "a")), TOOLS, completed={"a"})


def test_self_dependency() -> None:
    err = error_of(plan(step("a", "a")))
    assert str(err) == "step 'a' depends on itself"
    assert err.step_id == "a"


def test_cycle_path_is_printed() -> None:
    err = error_of(plan(step("a", "c"), step("b", "a"), step("c", "b"), step("d")))
    assert str(err) == "cycle: a -> b -> c -> a"
    assert err.step_id == "a"


def test_cycle_starts_at_first_step_in_plan_order() -> None:
    err = error_of(plan(step("z"), step("y", "x"), step("x", "y")))
    assert str(err) == "cycle: y -> x -> y"


def test_unknown_tool_with_suggestion() -> None:
    err = error_of(plan(step("a", tool="shop.inventry", params={"product_id": "p"})))
    assert str(err) == "step 'a': unknown tool 'shop.inventry'; did you mean 'shop.inventory'?"
    assert err.step_id == "a"


def test_unknown_tool_without_close_match_lists_known_tools() -> None:
    err = error_of(plan(step("a", tool="weather.today")))
    assert "unknown tool 'weather.today'" in str(err)
    assert "shop.inventory" in str(err)


def test_unknown_compensation_tool() -> None:
    err = error_of(plan(step("a", compensate={"tool": "shop.cancl"})))
    assert "step 'a': unknown compensation tool 'shop.cancl'" in str(err)
    assert "did you mean 'shop.cancel'" in str(err)


def test_unknown_param() -> None:
    err = error_of(plan(step("stock", tool="shop.inventory", params={"product_id": "p", "x": 1})))
    assert str(err).startswith("step 'stock': param 'x': unknown param for tool 'shop.inventory'")
    assert "product_id, warehouse" in str(err)
    assert err.step_id == "stock"


def test_missing_required_param() -> None:
    err = error_of(plan(step("stock", tool="shop.inventory", params={"warehouse": "w"})))
    assert str(err) == "step 'stock': param 'product_id': Field required"


def test_wrong_type_param() -> None:
    err = error_of(plan(step("r", tool="shop.reserve", params={"sku": "s", "qty": "many"})))
    assert str(err).startswith("step 'r': param 'qty': Input should be a valid integer")


def test_constraint_on_param() -> None:
    err = error_of(plan(step("r", tool="shop.reserve", params={"sku": "s", "qty": 0})))
    assert str(err) == "step 'r': param 'qty': Input should be greater than or equal to 1"


def test_referenced_param_is_checked_for_existence_not_type() -> None:
    ok = plan(
        step("a"), step("r", "a", tool="shop.reserve", params={"sku": "s", "qty": "{{a.output.n}}"})
    )
    validate_plan(ok, TOOLS)
    unknown = plan(
        step("a"),
        step("r", "a", tool="shop.reserve", params={"sku": "s", "qty": 1, "n": "{{a.output}}"}),
    )
    assert "param 'n': unknown param" in str(error_of(unknown))
    missing = plan(step("a"), step("r", "a", tool="shop.reserve", params={"qty": "{{a.output.n}}"}))
    assert str(error_of(missing)) == "step 'r': param 'sku': Field required"


def test_compensation_params_are_checked() -> None:
    err = error_of(plan(step("a", compensate={"tool": "shop.cancel", "params": {}})))
    assert str(err) == "step 'a': compensation: param 'reservation_id': Field required"


def test_reference_to_non_ancestor() -> None:
    p = plan(
        step("a"),
        step("b"),
        step("c", "b", tool="shop.inventory", params={"product_id": "{{a.output.id}}"}),
    )
    err = error_of(p)
    assert str(err) == "step 'c' references 'a' which is not among its dependencies (ancestors: b)"
    assert err.step_id == "c"


def test_reference_to_unknown_step() -> None:
    p = plan(step("c", tool="shop.inventory", params={"product_id": "{{zz.output.id}}"}))
    assert "step 'c' references unknown step 'zz'" in str(error_of(p))


def test_reference_to_transitive_ancestor_is_fine() -> None:
    p = plan(
        step("a"),
        step("b", "a"),
        step("c", "b", tool="shop.inventory", params={"product_id": "id-{{ a.output.id }}"}),
    )
    validate_plan(p, TOOLS)


def test_compensation_may_reference_its_own_step() -> None:
    p = plan(
        step(
            "a", compensate={"tool": "shop.cancel", "params": {"reservation_id": "{{a.output.id}}"}}
        )
    )
    validate_plan(p, TOOLS)


def test_fallback_may_depend_on_main_steps_and_each_other() -> None:
    p = plan(
        step("a"),
        step(
            "b",
            "a",
            fallback=[
                step("b_alt", "a"),
                step(
                    "b_alt2",
                    "b_alt",
                    tool="shop.inventory",
                    params={"product_id": "{{a.output.x}}"},
                ),
            ],
        ),
    )
    validate_plan(p, TOOLS)


def test_fallback_id_clash_with_main_plan() -> None:
    err = error_of(plan(step("a"), step("b", fallback=[step("a")])))
    assert str(err) == "fallback step 'a' of step 'b' clashes with step id 'a' already in the plan"
    assert err.step_id == "a"


def test_fallback_is_validated_like_a_graph() -> None:
    err = error_of(plan(step("a", fallback=[step("x", "y")])))
    assert str(err).startswith("step 'x' depends on unknown step 'y'")
    err = error_of(plan(step("a", fallback=[step("x", tool="nope")])))
    assert str(err).startswith("step 'x': unknown tool 'nope'")


def test_checks_run_in_the_listed_order() -> None:
    p = plan(step("a", tool="nope"), step("b", "ghost"), step("a"))
    errors = all_errors(p, TOOLS)
    assert [str(e).split(" '")[0] for e in errors][:3] == [
        "duplicate step id",
        "step",
        "step",
    ]
    assert "depends on unknown step 'ghost'" in str(errors[1])
    assert "unknown tool 'nope'" in str(errors[2])
    assert str(error_of(p)) == "duplicate step id 'a'"


OLD = plan(
    step("a", tool="shop.inventory", params={"product_id": "p"}),
    step("b", "a"),
)


def test_merge_accepts_unchanged_completed_steps() -> None:
    new = plan(
        step("a", tool="shop.inventory", params={"product_id": "p"}, title="retitled"),
        step("c", "a"),
    )
    validate_merge(OLD, new, completed={"a"})


def test_merge_refuses_redefined_completed_step() -> None:
    new = plan(step("a", tool="shop.inventory", params={"product_id": "q"}), step("b", "a"))
    with pytest.raises(PlanValidationError) as info:
        validate_merge(OLD, new, completed={"a"})
    assert str(info.value) == "a re-plan may not redefine completed step 'a' (changed: params)"
    assert info.value.step_id == "a"


def test_merge_may_rewrite_steps_that_are_not_completed() -> None:
    new = plan(
        step("a", tool="shop.inventory", params={"product_id": "p"}), step("b", tool="shop.noop")
    )
    validate_merge(OLD, new, completed={"a"})
    with pytest.raises(PlanValidationError, match="changed: dependencies"):
        validate_merge(OLD, new, completed={"a", "b"})
