"""Which completed steps a fork carries over from its parent (planner/carry_over.py)."""

from __future__ import annotations

from typing import Any

from planloop.core.models import StepState, StepStatus
from planloop.planner.carry_over import carry_over
from planloop.planner.plan import Plan


def plan(*steps: dict[str, Any]) -> Plan:
    return Plan.model_validate({"goal": "g", "steps": list(steps)})


def step(sid: str, *deps: str, **params: Any) -> dict[str, Any]:
    return {"id": sid, "tool": "bench.sleep", "params": params, "dependencies": list(deps)}


DIAMOND = plan(step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c"))


def done(*ids: str) -> dict[str, StepState]:
    return {
        i: StepState(status=StepStatus.COMPLETED, attempt=1, epoch=3, output_ref=f"ref-{i}")
        for i in ids
    }


def test_an_unchanged_plan_carries_every_completed_step() -> None:
    carried = carry_over(DIAMOND, done("a", "b", "c", "d"), DIAMOND, parent_sid="p")
    assert list(carried) == ["a", "b", "c", "d"]
    assert carried["b"].output_ref == "ref-b"
    assert carried["b"].attempt == 1
    assert carried["b"].epoch == 0
    assert carried["b"].note == "carried from p"


def test_a_changed_step_and_everything_after_it_run_again() -> None:
    edited = plan(step("a"), step("b", "a", seconds=1), step("c", "a"), step("d", "b", "c"))
    carried = carry_over(DIAMOND, done("a", "b", "c", "d"), edited, parent_sid="p")
    assert sorted(carried) == ["a", "c"]  # b changed params; d depends on b's new output


def test_steps_the_parent_did_not_complete_run() -> None:
    states = {**done("a", "c"), "b": StepState(status=StepStatus.FAILED, attempt=3)}
    carried = carry_over(DIAMOND, states, DIAMOND, parent_sid="p")
    assert sorted(carried) == ["a", "c"]


def test_a_new_tool_new_dependencies_or_a_new_step_are_not_carried() -> None:
    edited = plan(
        step("a"),
        {**step("b", "a"), "tool": "bench.echo"},
        step("c"),  # no longer depends on a
        step("d", "b", "c"),
        step("e", "a"),  # new
    )
    carried = carry_over(DIAMOND, done("a", "b", "c", "d"), edited, parent_sid="p")
    assert sorted(carried) == ["a"]


def test_a_cosmetic_change_keeps_the_output() -> None:
    edited = plan(
        step("a"),
        {**step("b", "a"), "title": "renamed", "timeout_s": 99},
        step("c", "a"),
        step("d", "b", "c"),
    )
    carried = carry_over(DIAMOND, done("a", "b", "c", "d"), edited, parent_sid="p")
    assert sorted(carried) == ["a", "b", "c", "d"]


def test_a_dropped_step_is_not_carried_and_its_dependents_are_judged_on_their_own() -> None:
    edited = plan(step("a"), step("c", "a"))
    carried = carry_over(DIAMOND, done("a", "b", "c", "d"), edited, parent_sid="p")
    assert sorted(carried) == ["a", "c"]
