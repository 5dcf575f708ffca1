"""Tests for validating an incremental re-plan by what it changed (planner/merge_validation.py).

The incremental check must accept exactly the merges that validating the whole merged plan
accepts, name the same culprit, and look only at the new steps.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import BaseModel

import planloop.planner.validation as validation
from planloop.core.errors import PlanValidationError
from planloop.core.tools import ToolContext, ToolRegistry, tool
from planloop.planner.merge import merge_remaining
from planloop.planner.merge_validation import validate_remaining_merge
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_index import index_of
from planloop.planner.validation import all_errors, validate_merge, validate_plan


class EchoParams(BaseModel):
    value: Any = None


class CountParams(BaseModel):
    n: int = 0


def _noop(params: Any, ctx: ToolContext) -> dict[str, Any]:
    return {}


def make_registry() -> ToolRegistry:
    reg = ToolRegistry()
    tool("t.echo", description="echo", params=EchoParams, registry=reg)(_noop)
    tool("t.count", description="count", params=CountParams, registry=reg)(_noop)
    return reg


TOOLS = make_registry()


def ref(step_id: str) -> dict[str, Any]:
    return {"value": f"{{{{{step_id}.output}}}}"}


def step(step_id: str, *deps: str, reads: str | None = None, **kwargs: Any) -> Step:
    params = ref(reads) if reads else {}
    return Step(id=step_id, tool="t.echo", params=params, dependencies=list(deps), **kwargs)


def chain(n: int) -> Plan:
    """``s0 <- s1 <- ... <- s{n-1}``, each step reading the one two before it (far)."""
    steps = [step("s0")] + [
        step(f"s{i}", f"s{i - 1}", reads=f"s{i - 2}" if i > 1 else None) for i in range(1, n)
    ]
    return Plan(goal="chain", steps=steps)


def full_check(current: Plan, merged: Plan, done: set[str]) -> None:
    validate_plan(merged, TOOLS, completed=done)
    validate_merge(current, merged, done)


def outcome(check: Any) -> str | None:
    try:
        check()
    except PlanValidationError as exc:
        return str(exc)
    return None


# --- the rules, each naming its culprit ---------------------------------------------------


def test_new_steps_that_keep_every_rule_pass() -> None:
    current = chain(6)
    done = {"s0", "s1", "s2"}
    incoming = [step("n1", "s2", reads="s0"), step("n2", "n1", "s5", reads="s1")]
    merged = merge_remaining(current, done, [], incoming)
    validate_remaining_merge(current, merged, incoming, TOOLS, completed=done)


def test_a_reference_to_a_non_ancestor_names_the_new_step() -> None:
    current = chain(4)
    incoming = [step("n1", "s1", reads="s3")]  # s3 is below s1, not above it
    merged = merge_remaining(current, {"s0"}, [], incoming)
    with pytest.raises(PlanValidationError, match="step 'n1' references 's3'") as info:
        validate_remaining_merge(current, merged, incoming, TOOLS, completed={"s0"})
    assert info.value.step_id == "n1"
    assert "(ancestors: s0, s1)" in str(info.value)


def test_a_cycle_through_new_steps_is_reported_with_its_path() -> None:
    current = chain(3)
    incoming = [step("a", "s2", "c"), step("b", "a"), step("c", "b")]
    merged = merge_remaining(current, set(), [], incoming)
    with pytest.raises(PlanValidationError, match=r"cycle: a -> b -> c -> a") as info:
        validate_remaining_merge(current, merged, incoming, TOOLS, completed=set())
    assert info.value.step_id == "a"


def test_a_redefined_step_that_closes_a_cycle_through_kept_steps_is_found() -> None:
    current = chain(5)  # s4 -> s3 -> s2 -> s1 -> s0
    incoming = [step("s1", "s0", "s3")]  # s1 now waits for s3, which waits for s1
    merged = merge_remaining(current, {"s0"}, [], incoming)
    with pytest.raises(PlanValidationError, match=r"cycle: s1 -> s2 -> s3 -> s1"):
        validate_remaining_merge(current, merged, incoming, TOOLS, completed={"s0"})


def test_a_kept_step_below_a_redefined_one_loses_the_ancestor_it_reads() -> None:
    current = chain(4)  # s3 reads s1 through s2
    incoming = [step("s2", "s0")]  # s2 no longer waits for s1
    merged = merge_remaining(current, {"s0"}, [], incoming)
    with pytest.raises(PlanValidationError, match="step 's3' references 's1'") as info:
        validate_remaining_merge(current, merged, incoming, TOOLS, completed={"s0"})
    assert info.value.step_id == "s3"


@pytest.mark.parametrize(
    ("incoming", "message"),
    [
        ([step("n", "nope")], "step 'n' depends on unknown step 'nope'"),
        ([step("n", "n")], "step 'n' depends on itself"),
        ([step("n"), step("n", "s0")], "duplicate step id 'n'"),
        ([Step(id="n", tool="t.nope")], "step 'n': unknown tool 't.nope'"),
        ([Step(id="n", tool="t.count", params={"n": "x"})], "step 'n': param 'n'"),
        (
            [step("n", fallback=[step("s1", "s0")])],
            "fallback step 's1' of step 'n' clashes with step id 's1'",
        ),
        ([step("n", fallback=[step("f", "s2", reads="s3")])], "step 'f' references 's3'"),
    ],
)
def test_each_rule_gives_the_message_of_full_validation(incoming: list[Step], message: str) -> None:
    current = chain(4)
    merged = merge_remaining(current, {"s0"}, [], incoming)
    ours = outcome(
        lambda: validate_remaining_merge(current, merged, incoming, TOOLS, completed={"s0"})
    )
    assert ours is not None
    assert message in ours
    assert ours == outcome(lambda: full_check(current, merged, {"s0"}))


def test_a_new_id_taken_by_a_kept_fallback_step_is_refused() -> None:
    current = Plan(steps=[step("a", fallback=[step("fa")]), step("b", "a")])
    incoming = [step("fa", "a")]
    merged = merge_remaining(current, set(), [], incoming)
    with pytest.raises(PlanValidationError, match="fallback step 'fa' of step 'a' clashes"):
        validate_remaining_merge(current, merged, incoming, TOOLS, completed=set())


# --- the same answers as validating the whole merged plan ---------------------------------


def random_plan(rng: random.Random, n: int) -> Plan:
    """A valid plan: dependencies on earlier steps, references to ancestors."""
    steps: list[Step] = []
    ancestors: dict[str, set[str]] = {}
    for i in range(n):
        sid = f"s{i}"
        deps = sorted({f"s{rng.randrange(i)}" for _ in range(rng.randrange(3))}) if i else []
        above = set(deps).union(*(ancestors[d] for d in deps))
        ancestors[sid] = above
        reads = rng.choice(sorted(above)) if above and rng.random() < 0.7 else None
        steps.append(step(sid, *deps, reads=reads))
    return Plan(goal="random", steps=steps)


def random_incoming(rng: random.Random, current: Plan, done: set[str], k: int) -> list[Step]:
    ids = current.step_ids
    fresh = [f"n{j}" for j in range(k)]
    incoming: list[Step] = []
    for j in range(k):
        roll = rng.random()
        sid = rng.choice(ids) if roll < 0.25 else fresh[j]
        pool = ids + fresh[:j] + (fresh[j + 1 :] if rng.random() < 0.1 else [])
        deps = sorted({rng.choice(pool) for _ in range(rng.randrange(3))} - {sid})
        if rng.random() < 0.03:
            deps.append("ghost")
        if rng.random() < 0.03:
            deps.append(sid)
        reads = rng.choice(pool) if rng.random() < 0.6 else None
        tool_name = "t.nope" if rng.random() < 0.03 else "t.echo"
        params = ref(reads) if reads else {}
        incoming.append(Step(id=sid, tool=tool_name, params=params, dependencies=deps))
    return incoming


def test_random_merges_get_the_answer_of_full_validation() -> None:
    rng = random.Random(11)
    checked = failed = 0
    for _ in range(400):
        current = random_plan(rng, rng.randrange(3, 25))
        by_id = current.by_id
        done: set[str] = set()
        for sid in current.step_ids[: rng.randrange(len(by_id))]:
            if rng.random() < 0.5 and all(d in done for d in by_id[sid].dependencies):
                done.add(sid)
        cancel = [s for s in current.step_ids if s not in done and rng.random() < 0.15]
        incoming = random_incoming(rng, current, done, rng.randrange(1, 6))
        try:
            merged = merge_remaining(current, done, cancel, incoming)
        except PlanValidationError:
            continue
        full = outcome(lambda: full_check(current, merged, done))  # noqa: B023
        ours = outcome(
            lambda: validate_remaining_merge(current, merged, incoming, TOOLS, completed=done)  # noqa: B023
        )
        assert (ours is None) == (full is None), (ours, full)
        if ours is not None:
            every = {str(e) for e in all_errors(merged, TOOLS, completed=done)}
            assert ours in every or ours.startswith("cycle: "), (ours, every)
            failed += 1
        checked += 1
    assert checked > 300
    assert 50 < failed < checked  # both kinds of merge were exercised


# --- the cost follows the new steps, not the plan ---------------------------------------


def test_the_rule_checks_of_a_merge_run_once_per_new_step_whatever_the_plan_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = validation.params_problem

    def counting(params: Any, spec: Any) -> str | None:
        calls.append(spec.name)
        return real(params, spec)

    monkeypatch.setattr(validation, "params_problem", counting)
    seen = []
    for n in (100, 2_000):
        current = chain(n)
        last = f"s{n - 1}"
        incoming = [step(f"n{j}", last, reads=f"s{n - 3}") for j in range(10)]
        merged = merge_remaining(current, set(), [], incoming)
        calls.clear()
        validate_remaining_merge(current, merged, incoming, TOOLS, completed=set())
        seen.append(len(calls))
    assert seen == [10, 10]


def test_references_to_direct_dependencies_need_no_ancestor_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an ancestor pass ran")

    monkeypatch.setattr(validation, "ancestor_bits", refuse)
    steps = [step("s0")] + [step(f"s{i}", f"s{i - 1}", reads=f"s{i - 1}") for i in range(1, 500)]
    validate_plan(Plan(steps=steps), TOOLS)


def test_the_index_a_merge_derives_equals_one_built_from_the_merged_plan() -> None:
    current = Plan(
        steps=[
            step("a", fallback=[step("fa", fallback=[step("ffa")])]),
            step("b", "a", fallback=[step("fb")]),
            step("c", "b"),
        ]
    )
    incoming = [step("b", "a"), step("d", "c", fallback=[step("fd")]), step("e"), step("e", "d")]
    merged = merge_remaining(current, set(), [], incoming)
    derived = index_of(merged)
    built = index_of(merged.model_copy())  # another object: built by walking its steps
    assert derived is not built
    assert dict(derived.by_id) == dict(built.by_id)
    assert (
        dict(derived.fallback_owner)
        == dict(built.fallback_owner)
        == {
            "fa": "a",
            "ffa": "a",
            "fd": "d",
        }
    )


def test_successive_merges_keep_an_index_equal_to_the_plan() -> None:
    plan = chain(5)
    for round_ in range(12):  # past the layers the index keeps before it flattens them
        incoming = [step(f"r{round_}", plan.steps[-1].id), step("s2", "s1")]
        merged = merge_remaining(plan, {"s0", "s1"}, [], incoming)
        validate_remaining_merge(plan, merged, incoming, TOOLS, completed={"s0", "s1"})
        plan = merged
    assert dict(index_of(plan).by_id) == plan.by_id
    assert len(plan.steps) == 5 + 12
