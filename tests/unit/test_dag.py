"""Tests for the pure DAG helpers."""

from __future__ import annotations

import pytest

from planloop.core.errors import PlanValidationError
from planloop.planner.dag import (
    ancestors,
    critical_path,
    descendants,
    find_cycle,
    ready_steps,
    to_mermaid,
    topological_order,
)
from planloop.planner.plan import Plan, Step


def step(step_id: str, *deps: str) -> Step:
    return Step(id=step_id, tool=f"t.{step_id}", dependencies=list(deps))


# a ─┬─> b ─┐
#    └─> c ─┴─> d ──> e        f (alone)
DIAMOND = Plan(
    steps=[
        step("a"),
        step("b", "a"),
        step("c", "a"),
        step("d", "b", "c"),
        step("e", "d"),
        step("f"),
    ]
)


def test_ancestors_and_descendants() -> None:
    assert ancestors(DIAMOND, "e") == {"a", "b", "c", "d"}
    assert ancestors(DIAMOND, "a") == set()
    assert descendants(DIAMOND, "a") == {"b", "c", "d", "e"}
    assert descendants(DIAMOND, "f") == set()
    with pytest.raises(PlanValidationError, match="no step 'zz'"):
        descendants(DIAMOND, "zz")


def test_topological_order_keeps_plan_order_on_ties() -> None:
    assert topological_order(DIAMOND) == ["a", "b", "c", "d", "e", "f"]
    shuffled = Plan(
        steps=[
            step("e", "d"),
            step("d", "b", "c"),
            step("c", "a"),
            step("f"),
            step("b", "a"),
            step("a"),
        ]
    )
    assert topological_order(shuffled) == ["f", "a", "c", "b", "d", "e"]


def test_topological_order_ignores_dependencies_outside_the_plan() -> None:
    plan = Plan(steps=[step("x", "done_before"), step("y", "x")])
    assert topological_order(plan) == ["x", "y"]


def test_topological_order_names_the_cycle() -> None:
    plan = Plan(steps=[step("a", "b"), step("b", "a")])
    with pytest.raises(PlanValidationError, match=r"cycle: a -> b -> a"):
        topological_order(plan)


def test_find_cycle() -> None:
    assert find_cycle({"a": [], "b": ["a"]}) is None
    assert find_cycle({"p": ["r"], "q": ["p"], "r": ["q"]}, ["q", "p", "r"]) == ["q", "r", "p", "q"]


def test_critical_path() -> None:
    durations = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0, "e": 1.0, "f": 7.5}
    length, path = critical_path(DIAMOND, durations)
    assert length == pytest.approx(8.0)
    assert path == ["a", "b", "d", "e"]
    length, path = critical_path(DIAMOND, {**durations, "f": 9.0})
    assert length == pytest.approx(9.0)
    assert path == ["f"]


def test_critical_path_treats_missing_durations_as_zero() -> None:
    length, path = critical_path(DIAMOND, {"c": 3.0, "e": 0.5})
    assert length == pytest.approx(3.5)
    assert path == ["a", "c", "d", "e"]


def test_ready_steps() -> None:
    assert ready_steps(DIAMOND, {}) == ["a", "f"]
    statuses = {"a": "completed", "b": "completed", "c": "running", "f": "failed"}
    assert ready_steps(DIAMOND, statuses) == []
    statuses["c"] = "completed"
    assert ready_steps(DIAMOND, statuses) == ["d"]
    assert ready_steps(DIAMOND, {"a": "skipped"}, done="skipped") == ["b", "c", "f"]


def test_mermaid_has_nodes_edges_and_status_classes() -> None:
    text = to_mermaid(
        DIAMOND, {"a": "completed", "b": "failed", "c": "running", "e": "cancelled", "f": "skipped"}
    )
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert '    s0["a<br/>t.a<br/>completed"]:::completed' in lines
    assert '    s1["b<br/>t.b<br/>failed"]:::failed' in lines
    assert '    s3["d<br/>t.d<br/>pending"]:::pending' in lines
    assert '    s4["e<br/>t.e<br/>cancelled"]:::cancelled' in lines
    for edge in ("s0 --> s1", "s0 --> s2", "s1 --> s3", "s2 --> s3", "s3 --> s4"):
        assert f"    {edge}" in lines
    assert sum("-->" in line for line in lines) == 5
    classdefs = {line.split()[1]: line for line in lines if line.strip().startswith("classDef")}
    assert {"completed", "failed", "running", "skipped", "cancelled", "pending"} <= set(classdefs)
    assert "stroke-dasharray" in classdefs["cancelled"]
    assert "#ffffff" in classdefs["pending"]


def test_mermaid_without_statuses_is_all_pending() -> None:
    text = to_mermaid(Plan(steps=[step("only")]))
    assert '["only<br/>t.only<br/>pending"]:::pending' in text
