"""Tests for the input limits checked once per plan document, and the stored form of a plan.

A plan document that passes one walk skips the per-step checks (which exist to name the
culprit); one that fails it gets them, so messages are the same as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import planloop.planner.plan_limits as plan_limits
from planloop.core.errors import PlanLoadError
from planloop.core.input_limits import InputLimits, clean
from planloop.planner.plan import Plan, parse_plan
from planloop.planner.references import find_references
from planloop.planner.safe_yaml import YamlLimitError, load_yaml

LIMITS = InputLimits(max_nesting_depth=4)


def document(params: dict[str, Any], steps: int = 3) -> str:
    return json.dumps(
        {
            "goal": "g",
            "steps": [
                {"id": f"s{i}", "tool": "t", "params": params, "dependencies": [f"s{i - 1}"]}
                for i in range(1, steps + 1)
            ]
            + [{"id": "s0", "tool": "t"}],
        }
    )


@pytest.fixture
def step_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = plan_limits._check_values

    def counting(data: dict[str, Any], limits: InputLimits) -> None:
        calls.append(str(data.get("id")))
        real(data, limits)

    monkeypatch.setattr(plan_limits, "_check_values", counting)
    return calls


def test_a_clean_document_is_walked_once_not_step_by_step(step_checks: list[str]) -> None:
    plan = parse_plan(document({"a": {"b": {"c": [1]}}}, steps=50), fmt="json", limits=LIMITS)
    assert len(plan.steps) == 51
    assert step_checks == []


def test_a_document_that_breaks_a_limit_names_the_step_and_the_path(
    step_checks: list[str],
) -> None:
    too_deep = {"a": {"b": {"c": {"d": [1]}}}}  # five levels, the limit is four
    with pytest.raises(PlanLoadError, match=r"step 's1': params\.a\.b\.c\.d: nested deeper"):
        parse_plan(document(too_deep), fmt="json", limits=LIMITS)
    assert step_checks[0] == "s1"


def test_a_control_character_anywhere_sends_the_document_step_by_step(
    step_checks: list[str],
) -> None:
    with pytest.raises(PlanLoadError, match="control character"):
        parse_plan(document({"text": "bell\x07"}), fmt="json", limits=LIMITS)
    assert step_checks


def test_fallback_nesting_is_still_checked_on_a_clean_document() -> None:
    step: dict[str, Any] = {"id": "f", "tool": "t"}
    for level in range(12):
        step = {"id": f"f{level}", "tool": "t", "fallback": [step]}
    with pytest.raises(PlanLoadError, match="fallback sub-graphs nested more than"):
        parse_plan(json.dumps({"steps": [step]}), fmt="json")


def test_clean_searches_every_key_and_non_string_keys_too() -> None:
    assert clean([({"ok": 1, "k\x01": 2}, 3)]) is False
    assert clean([({1: "a", "b": "c"}, 3)]) is True
    assert clean([({1: "a", "b\x00": "c"}, 3)]) is False


def test_the_stored_form_leaves_defaults_out_and_reads_back_equal() -> None:
    plan = parse_plan(document({"x": "{{s0.output}}"}), fmt="json")
    stored = plan.model_dump_json(exclude_defaults=True)
    assert '"critical"' not in stored
    assert Plan.model_validate_json(stored) == plan


def test_find_references_walks_nested_values_and_ignores_plain_text() -> None:
    value = {"a": ["{{x.output}} and {{ y.output.z }}", ("{{z.output.0}}",)], "b": "{ {no}}"}
    assert find_references(value) == {"x", "y", "z"}
    assert find_references("no references {{ here") == set()


def test_yaml_without_an_anchor_loads_and_an_alias_without_one_is_refused() -> None:
    assert load_yaml("a: '*not an alias*'\nb: [1, 2]", max_alias_nodes=0) == {
        "a": "*not an alias*",
        "b": [1, 2],
    }
    with pytest.raises(Exception, match="alias"):
        load_yaml("a: *missing", max_alias_nodes=0)
    with pytest.raises(YamlLimitError):
        load_yaml("a: &x [1, 2, 3]\nb: [*x, *x]", max_alias_nodes=1)
