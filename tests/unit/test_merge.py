"""Plan surgery for re-planning: freeze, cancel, prune orphans, inject sub-graphs and fallbacks."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core.errors import PlanValidationError
from planloop.core.tools import load_tools
from planloop.planner.merge import inject_fallback, merge_remaining, orphans, replace_remaining
from planloop.planner.plan import Plan, Step
from planloop.planner.validation import validate_plan

SKU = {"product_id": "SKU1"}


def step(sid: str, tool: str = "ecommerce.inventory", *deps: str, **extra: Any) -> Step:
    return Step(
        id=sid, tool=tool, params=extra.pop("params", SKU), dependencies=list(deps), **extra
    )


@pytest.fixture
def plan() -> Plan:
    """a -> b -> c, d -> e: two chains."""
    return Plan(
        goal="analyse SKU1",
        constraints=["budget is 5k"],
        steps=[
            step("a", "ecommerce.order_stats"),
            step("b", "ecommerce.inventory", "a"),
            step("c", "ecommerce.reviews", "b"),
            step("d", "ecommerce.competitors"),
            step("e", "ecommerce.reviews", "d"),
        ],
    )


def test_orphans_are_transitive_and_skip_completed(plan: Plan) -> None:
    assert orphans(plan, {"a"}, completed=()) == {"b", "c"}
    assert orphans(plan, {"b"}, completed=()) == {"c"}
    # a completed step keeps its output, so what depends on it is no orphan
    assert orphans(plan, {"a"}, completed={"b"}) == set()
    assert orphans(plan, {"d"}, completed={"e"}) == set()


def test_merge_freezes_completed_cancels_prunes_and_appends(plan: Plan) -> None:
    new = step("b2", "supply_chain.erp_stock", "a", params={"sku": "SKU1"})
    merged = merge_remaining(plan, completed={"a"}, cancel={"b"}, subgraph=[new])
    assert merged.step_ids == ["a", "d", "e", "b2"]
    assert merged.step("a") == plan.step("a")  # frozen: the very same definition
    assert merged.goal == plan.goal
    assert merged.constraints == plan.constraints
    validate_plan(merged, load_tools(), completed={"a"})


def test_merge_replaces_a_removed_step_in_place(plan: Plan) -> None:
    again = step("b", "supply_chain.erp_stock", "a", params={"sku": "SKU1"})
    merged = merge_remaining(plan, completed={"a"}, cancel={"b"}, subgraph=[again])
    assert merged.step_ids == ["a", "b", "d", "e"]  # c was b's orphan and went with it
    assert merged.step("b").tool == "supply_chain.erp_stock"


def test_merge_replaces_a_kept_step_in_place(plan: Plan) -> None:
    other = step("d", "ecommerce.order_stats")
    merged = merge_remaining(plan, completed={"a"}, cancel=(), subgraph=[other])
    assert merged.step_ids == plan.step_ids
    assert merged.step("d").tool == "ecommerce.order_stats"
    assert merged.step("e").dependencies == ["d"]


def test_merge_refuses_to_redefine_a_completed_step(plan: Plan) -> None:
    changed = step("a", "ecommerce.order_stats", params={"product_id": "SKU2"})
    with pytest.raises(PlanValidationError, match="may not redefine completed step 'a'") as info:
        merge_remaining(plan, completed={"a"}, cancel={"b"}, subgraph=[changed])
    assert info.value.step_id == "a"


def test_merge_drops_an_unchanged_repeat_of_a_completed_step(plan: Plan) -> None:
    merged = merge_remaining(plan, completed={"a"}, cancel={"b"}, subgraph=[plan.step("a")])
    assert merged.step_ids == ["a", "d", "e"]


def test_cancelling_a_completed_step_has_no_effect(plan: Plan) -> None:
    merged = merge_remaining(plan, completed={"a"}, cancel={"a", "e"}, subgraph=[])
    assert merged.step_ids == ["a", "b", "c", "d"]


def test_cancelling_an_unknown_step_is_refused(plan: Plan) -> None:
    with pytest.raises(PlanValidationError, match="cannot cancel unknown step"):
        merge_remaining(plan, completed=(), cancel={"zz"}, subgraph=[])


def test_merge_refuses_an_empty_result(plan: Plan) -> None:
    with pytest.raises(PlanValidationError, match="no steps left"):
        merge_remaining(plan, completed=(), cancel={"a", "d"}, subgraph=[])


def test_replace_keeps_completed_steps_and_replaces_the_rest(plan: Plan) -> None:
    new = Plan(
        goal="ignored",
        constraints=["budget is 5k", "no writes"],
        steps=[
            plan.step("a"),
            step("x", "ecommerce.reviews", "b"),
            step("y", "bench.sleep", params={}),
        ],
    )
    merged = replace_remaining(plan, completed={"a", "b"}, new_plan=new)
    assert merged.step_ids == ["a", "b", "x", "y"]
    assert merged.step("b").dependencies == ["a"]  # completed steps keep their dependencies
    assert merged.goal == "analyse SKU1"
    assert merged.constraints == ["budget is 5k", "no writes"]


def test_replace_refuses_a_changed_completed_step(plan: Plan) -> None:
    new = Plan(steps=[step("b", "ecommerce.reviews")])
    with pytest.raises(PlanValidationError, match="may not redefine completed step 'b'"):
        replace_remaining(plan, completed={"a", "b"}, new_plan=new)


def supply_plan() -> Plan:
    alt = step("alt", "supply_chain.alternative_suppliers", params={"sku": "SKU1"})
    verify_alt = step(
        "verify_alt",
        "supply_chain.verify_supplier",
        "alt",
        params={"sku": "SKU1", "supplier_id": "{{alt.output.suppliers.0.supplier_id}}"},
    )
    return Plan(
        goal="restock SKU1",
        steps=[
            step("stock", "supply_chain.erp_stock", params={"sku": "SKU1"}),
            step(
                "verify",
                "supply_chain.verify_supplier",
                "stock",
                params={"sku": "SKU1"},
                fallback=[alt, verify_alt],
            ),
            step(
                "po", "supply_chain.request_approval", "verify", "stock", params={"subject": "PO"}
            ),
        ],
    )


def test_inject_fallback_rewires_dependents_to_the_sinks() -> None:
    plan = supply_plan()
    injected = inject_fallback(plan, "verify")
    assert injected.step_ids == ["stock", "verify", "alt", "verify_alt", "po"]
    assert injected.step("verify").fallback == []  # spent; the failed step stays
    assert injected.step("po").dependencies == ["stock", "verify_alt"]
    validate_plan(injected, load_tools())


def test_inject_fallback_with_two_sinks() -> None:
    plan = supply_plan()
    two = [step("f1", "ecommerce.inventory"), step("f2", "ecommerce.reviews")]
    plan = plan.model_copy(
        update={
            "steps": [
                plan.steps[0],
                plan.steps[1].model_copy(update={"fallback": two}),
                plan.steps[2],
            ]
        }
    )
    assert inject_fallback(plan, "verify").step("po").dependencies == ["stock", "f1", "f2"]


def test_inject_fallback_needs_a_fallback_and_fresh_ids() -> None:
    plan = supply_plan()
    with pytest.raises(PlanValidationError, match="declares no fallback"):
        inject_fallback(plan, "stock")
    clash = plan.step("verify").model_copy(update={"fallback": [step("po", "ecommerce.inventory")]})
    bad = plan.model_copy(update={"steps": [plan.steps[0], clash, plan.steps[2]]})
    with pytest.raises(PlanValidationError, match="fallback step 'po' of step 'verify' clashes"):
        inject_fallback(bad, "verify")
