"""A re-plan's answer is merged into the plan in force once, and that merged plan is the one
validated, fingerprinted and returned (a :class:`Replan`) for the session to install."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core.errors import RepeatedPlanError
from planloop.planner import replans
from planloop.planner.plan import Plan, Step
from planloop.planner.replans import Replanner
from planloop.planner.situation import Situation, StepView
from tests.unit.loop_fixtures import registry, step
from tests.unit.test_rounds import ScriptedChat

CURRENT = Plan(goal="g", steps=[step("a"), step("b", "a"), step("c", "b"), step("d", "a")])
SUBGRAPH = {"steps": [{"id": "b2", "tool": "t.alt", "dependencies": ["a"]}]}


def situation() -> Situation:
    statuses = {"a": "completed", "b": "failed", "c": "pending", "d": "pending"}
    views = tuple(
        StepView(id=i, tool="t.a", title="", status=s, attempts=1) for i, s in statuses.items()
    )
    return Situation(
        goal="g",
        constraints=(),
        steps=views,
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="REPLAN",
    )


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls to the merge ``name`` the re-planner makes."""
    calls: list[int] = []
    real = getattr(replans, name)

    def merge(*args: Any) -> Plan:
        calls.append(1)
        return real(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(replans, name, merge)
    return calls


def test_an_incremental_replan_merges_once_and_returns_the_plan_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting(monkeypatch, "merge_remaining")
    chat = ScriptedChat(replanner=[SUBGRAPH])

    replan = Replanner(chat, registry()).replan_remaining(  # type: ignore[arg-type]
        situation(), CURRENT, {"a"}, cancel={"b"}
    )

    assert len(calls) == 1
    assert replan.plan is not None
    assert replan.plan.step_ids == ["a", "d", "b2"]  # b and its orphan c removed
    assert replan.added == {"b2"}
    assert replan.added_fingerprint() == Plan(steps=[replan.plan.step("b2")]).fingerprint()
    assert len(replan.usages) == 1


def test_a_full_replan_merges_once_and_returns_the_plan_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting(monkeypatch, "replace_remaining")
    chat = ScriptedChat(replanner=[{"goal": "g", **SUBGRAPH}])

    replan = Replanner(chat, registry()).replan_full(  # type: ignore[arg-type]
        situation(), CURRENT, {"a"}
    )

    assert len(calls) == 1
    assert replan.plan is not None
    assert replan.plan.step_ids == ["a", "b2"]
    assert replan.added == {"b2"}


def test_an_answer_that_repeats_completed_steps_only_adds_nothing() -> None:
    chat = ScriptedChat(replanner=[{"steps": [{"id": "a", "tool": "t.a"}]}])

    replan = Replanner(chat, registry()).replan_remaining(  # type: ignore[arg-type]
        situation(), CURRENT, {"a"}, cancel={"b"}
    )

    assert replan.plan is None
    assert replan.added == frozenset()


def test_the_merged_plan_is_a_fingerprint_a_failed_proposal_is_known_by() -> None:
    merged = replans.merge_remaining(
        CURRENT, {"a"}, {"b"}, [Step.model_validate(s) for s in SUBGRAPH["steps"]]
    )
    chat = ScriptedChat(replanner=[SUBGRAPH, SUBGRAPH])

    with pytest.raises(RepeatedPlanError):
        Replanner(chat, registry()).replan_remaining(  # type: ignore[arg-type]
            situation(), CURRENT, {"a"}, cancel={"b"}, failed_fingerprints={merged.fingerprint()}
        )
    assert len(chat.asked) == 2
