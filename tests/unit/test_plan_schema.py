"""Tests for the plan schema, loading from files and fingerprints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planloop.core.errors import PlanLoadError, PlanValidationError
from planloop.planner.plan import Plan, Step, load_plan, parse_plan

PLAN_YAML = """\
goal: Analyse SKU12345 and advise on stock and pricing
steps:
  - id: orders
    tool: ecommerce.order_stats
    params: {product_id: SKU12345}
  - id: stock
    tool: ecommerce.inventory
    params: {product_id: SKU12345}
    timeout_s: 10
    max_retries: 2
    expect:
      - {path: shortfall, op: ge, value: 0}
  - id: restock
    tool: supply_chain.reserve_stock
    params: {sku: SKU12345, qty: "{{stock.output.shortfall}}"}
    dependencies: [orders, stock]
    critical: true
    compensate: {tool: supply_chain.cancel_reservation, params: {sku: SKU12345}}
    fallback:
      - id: alt
        tool: supply_chain.alternative_suppliers
        params: {sku: SKU12345}
        dependencies: [stock]
"""


def test_load_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN_YAML)
    plan = load_plan(path)
    assert plan.goal.startswith("Analyse SKU12345")
    assert plan.step_ids == ["orders", "stock", "restock"]
    restock = plan.step("restock")
    assert restock.dependencies == ["orders", "stock"]
    assert restock.critical is True
    assert restock.params["qty"] == "{{stock.output.shortfall}}"
    assert restock.compensate is not None
    assert restock.compensate.tool == "supply_chain.cancel_reservation"
    assert [s.id for s in restock.fallback] == ["alt"]
    stock = plan.by_id["stock"]
    assert stock.timeout_s == 10.0
    assert stock.max_retries == 2
    assert stock.expect[0].op == "ge"
    assert plan.step("orders").max_retries is None


def test_load_json_file_round_trips(tmp_path: Path) -> None:
    plan = parse_plan(PLAN_YAML)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    again = load_plan(str(path))
    assert again == plan
    assert again.fingerprint() == plan.fingerprint()


def test_yml_suffix_is_yaml(tmp_path: Path) -> None:
    path = tmp_path / "plan.yml"
    path.write_text(PLAN_YAML)
    assert len(load_plan(path).steps) == 3


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(PlanLoadError, match="file not found") as info:
        load_plan(path)
    assert str(path) in str(info.value)
    assert info.value.source == str(path)


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "plan.txt"
    path.write_text(PLAN_YAML)
    with pytest.raises(PlanLoadError, match=r"unsupported plan file type '\.txt'"):
        load_plan(path)


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("goal: x\nsteps:\n  - id: a\n    tool: [unclosed\n")
    with pytest.raises(PlanLoadError, match=r"bad YAML at line \d+") as info:
        load_plan(path)
    assert str(path) in str(info.value)


def test_bad_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"steps": [\n  {"id": "a",, "tool": "t"}\n]}')
    with pytest.raises(PlanLoadError, match=r"bad JSON at line 2"):
        load_plan(path)


def test_schema_mismatch_lists_field_paths(tmp_path: Path) -> None:
    doc = {
        "steps": [
            {"id": "a", "tool": "t"},
            {"id": "b", "tool": "t"},
            {"id": "c"},
            {"id": "d", "tool": "t", "colour": "red"},
        ]
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanLoadError) as info:
        load_plan(path)
    message = str(info.value)
    assert "steps.2.tool: Field required" in message
    assert "steps.3.colour: Extra inputs are not permitted" in message
    assert str(path) in message
    assert "pydantic" not in message  # readable text, not the raw dump with URLs


def test_schema_errors_inside_fallback_and_bounds() -> None:
    text = "steps:\n  - {id: a, tool: t, timeout_s: 0, fallback: [{id: '1bad', tool: t}]}\n"
    with pytest.raises(PlanLoadError) as info:
        parse_plan(text, source="inline")
    message = str(info.value)
    assert message.startswith("inline: ")
    assert "steps.0.timeout_s: Input should be greater than 0" in message
    assert "steps.0.fallback.0.id: String should match pattern" in message


def test_empty_steps_and_non_mapping_documents_are_refused() -> None:
    with pytest.raises(PlanLoadError, match="steps: List should have at least 1 item"):
        parse_plan("goal: nothing\nsteps: []\n")
    with pytest.raises(PlanLoadError, match="must be a mapping"):
        parse_plan("- id: a\n  tool: t\n")
    with pytest.raises(PlanLoadError, match="must be a mapping"):
        parse_plan("")


def test_plan_is_frozen() -> None:
    plan = parse_plan(PLAN_YAML)
    with pytest.raises(ValueError, match="frozen"):
        plan.goal = "other"  # type: ignore[misc]


def test_step_lookup_names_unknown_id() -> None:
    plan = parse_plan(PLAN_YAML)
    with pytest.raises(PlanValidationError, match="no step 'ghost'") as info:
        plan.step("ghost")
    assert info.value.step_id == "ghost"


def _plan(*steps: Step) -> Plan:
    return Plan(steps=list(steps))


def test_fingerprint_ignores_step_and_dependency_order() -> None:
    a = Step(id="a", tool="t", params={"x": 1})
    b = Step(id="b", tool="t")
    c1 = Step(id="c", tool="t", dependencies=["a", "b"])
    c2 = Step(id="c", tool="t", dependencies=["b", "a"])
    assert _plan(a, b, c1).fingerprint() == _plan(c2, b, a).fingerprint()


def test_fingerprint_changes_with_params_tool_and_dependencies() -> None:
    base = _plan(Step(id="a", tool="t", params={"x": 1}), Step(id="b", tool="t"))
    other_params = _plan(Step(id="a", tool="t", params={"x": 2}), Step(id="b", tool="t"))
    other_tool = _plan(Step(id="a", tool="u", params={"x": 1}), Step(id="b", tool="t"))
    other_deps = _plan(
        Step(id="a", tool="t", params={"x": 1}), Step(id="b", tool="t", dependencies=["a"])
    )
    prints = {p.fingerprint() for p in (base, other_params, other_tool, other_deps)}
    assert len(prints) == 4
    assert len(base.fingerprint()) == 64
