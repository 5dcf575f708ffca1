"""Tests for finding and resolving ``{{step.output.path}}`` references."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core.errors import PlanReferenceError
from planloop.planner.references import find_references, has_reference, resolve_params

OUTPUTS: dict[str, Any] = {
    "stock": {"shortfall": 40, "ok": True, "warehouse": {"name": "east", "bins": [3, 7]}},
    "reviews": {"items": [{"text": "great"}, {"text": "bad"}], "summary": "mixed"},
}


def test_find_references_in_nested_values() -> None:
    params = {
        "a": "{{stock.output.shortfall}}",
        "b": {"c": ["x", "before {{ reviews.output.items.0.text }} after"]},
        "d": 3,
        "e": "{{ not a ref }}",
        "f": "{{orders.output}}",
    }
    assert find_references(params) == {"stock", "reviews", "orders"}
    assert has_reference(params)
    assert not has_reference({"a": "plain {{text}}", "b": [1, 2]})


def test_exact_reference_keeps_its_type() -> None:
    resolved = resolve_params(
        {
            "qty": "{{stock.output.shortfall}}",
            "ok": "{{stock.output.ok}}",
            "where": "{{ stock.output.warehouse }}",
            "all": "{{reviews.output}}",
        },
        OUTPUTS,
        step_id="restock",
    )
    assert resolved["qty"] == 40
    assert isinstance(resolved["qty"], int)
    assert resolved["ok"] is True
    assert resolved["where"] == {"name": "east", "bins": [3, 7]}
    assert resolved["all"] == OUTPUTS["reviews"]


def test_references_inside_text_are_interpolated() -> None:
    resolved = resolve_params(
        {
            "note": "need {{stock.output.shortfall}} at {{stock.output.warehouse.name}}: "
            "{{stock.output.warehouse.bins}} ({{reviews.output.summary}})"
        },
        OUTPUTS,
        step_id="s",
    )
    assert resolved["note"] == "need 40 at east: [3, 7] (mixed)"


def test_nested_params_and_list_indexes() -> None:
    resolved = resolve_params(
        {
            "body": {
                "first": "{{reviews.output.items.1.text}}",
                "bins": ["{{stock.output.warehouse.bins.0}}", 9],
            },
            "plain": 1.5,
        },
        OUTPUTS,
        step_id="s",
    )
    assert resolved == {"body": {"first": "bad", "bins": [3, 9]}, "plain": 1.5}


def test_params_are_not_modified_in_place() -> None:
    params = {"a": {"b": "{{stock.output.shortfall}}"}}
    resolve_params(params, OUTPUTS, step_id="s")
    assert params == {"a": {"b": "{{stock.output.shortfall}}"}}


def test_missing_step_output() -> None:
    with pytest.raises(PlanReferenceError) as info:
        resolve_params({"x": "{{orders.output.total}}"}, OUTPUTS, step_id="report")
    err = info.value
    assert err.step_id == "report"
    assert err.reference == "{{orders.output.total}}"
    assert str(err) == (
        "step 'report': cannot resolve {{orders.output.total}}: "
        "no output recorded for step 'orders'"
    )


def test_missing_key_names_the_segment() -> None:
    with pytest.raises(PlanReferenceError) as info:
        resolve_params({"x": "n={{stock.output.warehouse.city}}"}, OUTPUTS, step_id="s")
    message = str(info.value)
    assert "missing segment 'city'" in message
    assert "stock.output.warehouse has no key 'city' (keys: bins, name)" in message


def test_list_index_out_of_range() -> None:
    with pytest.raises(PlanReferenceError, match=r"missing segment '5'.*length 2"):
        resolve_params({"x": "{{reviews.output.items.5.text}}"}, OUTPUTS, step_id="s")


def test_path_into_a_scalar() -> None:
    with pytest.raises(PlanReferenceError, match="is a int, so has no 'deep'"):
        resolve_params({"x": "{{stock.output.shortfall.deep}}"}, OUTPUTS, step_id="s")
