"""Tests for checking step outputs against ``expect``."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.planner.expect import check_expectations
from planloop.planner.plan import Expectation

OUTPUT: dict[str, Any] = {
    "shortfall": -3,
    "status": "ok",
    "items": [{"sku": "A"}, {"sku": "B"}],
    "note": None,
    "empty": [],
}


def check(path: str, op: Any, value: Any = None) -> list[str]:
    return check_expectations([Expectation(path=path, op=op, value=value)], OUTPUT)


@pytest.mark.parametrize(
    ("path", "op", "value"),
    [
        ("shortfall", "exists", None),
        ("", "truthy", None),
        ("status", "truthy", None),
        ("status", "eq", "ok"),
        ("status", "ne", "bad"),
        ("shortfall", "lt", 0),
        ("shortfall", "le", -3),
        ("shortfall", "ge", -3),
        ("shortfall", "gt", -4),
        ("status", "in", ["ok", "partial"]),
        ("status", "not_in", ["bad"]),
        ("items", "len_ge", 2),
        ("items", "len_le", 2),
        ("items.1.sku", "eq", "B"),
    ],
)
def test_passing_checks(path: str, op: str, value: Any) -> None:
    assert check(path, op, value) == []


def test_failed_comparison_message() -> None:
    assert check("shortfall", "gt", 0) == ["shortfall: expected gt 0, got -3"]
    assert check("status", "in", ["x", "y"]) == ['status: expected in ["x", "y"], got "ok"']


def test_failed_length_and_truthiness() -> None:
    assert check("items", "len_ge", 3) == ["items: expected len_ge 3, got length 2"]
    assert check("empty", "truthy") == ["empty: expected truthy, got []"]


def test_missing_path_fails_exists_and_every_comparison() -> None:
    assert check("price", "exists") == ["price: expected to exist, got nothing (path missing)"]
    assert check("items.7.sku", "eq", "A") == [
        'items.7.sku: expected eq "A", got nothing (path missing)'
    ]
    assert check("price", "ne", 1) != []
    assert check("price", "not_in", [1]) != []


def test_null_does_not_exist() -> None:
    assert check("note", "exists") == ["note: expected to exist, got null"]


def test_incomparable_values_fail_instead_of_raising() -> None:
    [message] = check("status", "gt", 3)
    assert message.startswith('status: expected gt 3, got "ok"')
    assert check("shortfall", "len_ge", 1) != []


def test_every_failure_is_reported_in_order() -> None:
    expect = [
        Expectation(path="shortfall", op="ge", value=0),
        Expectation(path="status", op="eq", value="ok"),
        Expectation(path="whole", op="exists"),
    ]
    failures = check_expectations(expect, OUTPUT)
    assert [f.split(":")[0] for f in failures] == ["shortfall", "whole"]


def test_whole_output_path_is_labelled() -> None:
    assert check_expectations([Expectation(op="truthy")], {}) == ["output: expected truthy, got {}"]
