"""The one input check (planner/input_check.py) and what it builds on: duplicate keys,
overlong integers, answer schemas, options; the corpus refused by the producer's check and
by the supervisor's own (what passes one entry point passes all)."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core import json_input
from planloop.core.errors import ConfigError, InputLimitError, PlanError, PlanloopError
from planloop.core.input_limits import MAX_INT_DIGITS, InputLimits, value_problem
from planloop.core.models import SessionOptions
from planloop.planner import input_check
from planloop.planner.answer_schema import check_answer_schema
from planloop.planner.plan import Plan, parse_plan
from tests.hostile_inputs import LIMITS_ENV, SECRET, Hostile, cases, one_step

LIMITS = InputLimits(
    max_input_bytes=int(LIMITS_ENV["PLANLOOP_MAX_INPUT_BYTES"]),
    max_nesting_depth=64,
    max_yaml_alias_nodes=10_000,
    max_step_timeout_s=3600,
    max_plan_bytes=int(LIMITS_ENV["PLANLOOP_MAX_PLAN_BYTES"]),
)


def test_a_duplicate_json_key_is_refused_naming_it() -> None:
    with pytest.raises(json_input.JsonInputError, match="duplicate key 'tool' in one object"):
        json_input.loads('{"id": "s", "tool": "a", "tool": "b"}')
    assert json_input.loads('{"a": {"a": 1}}') == {"a": {"a": 1}}  # same key, two objects


def test_a_duplicate_yaml_key_is_refused_naming_it_and_both_lines() -> None:
    text = "goal: g\nsteps:\n  - id: s\n    tool: bench.echo\n    id: t\n"
    with pytest.raises(
        PlanError, match=r"bad YAML at line 5: duplicate key 'id' \(first at line 3\)"
    ):
        parse_plan(text)
    with pytest.raises(PlanError, match="duplicate key 'a'"):
        parse_plan("steps: [{id: s, tool: t, params: {a: 1, a: 2}}]")
    merged = parse_plan(
        "steps:\n  - {id: a, tool: t, params: &x {a: 1}}\n"
        "  - {id: b, tool: t, params: {<<: *x, a: 2}}\n"
    )
    assert merged.steps[1].params == {"a": 2}  # a merge key may be overridden


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_an_integer_past_the_digit_limit_is_refused_and_one_at_it_accepted(fmt: str) -> None:
    def plan(digits: int) -> str:
        number = "9" * digits
        if fmt == "json":
            return f'{{"steps": [{{"id": "s", "tool": "t", "params": {{"v": {number}}}}}]}}'
        return f"steps: [{{id: s, tool: t, params: {{v: {number}}}}}]"

    assert parse_plan(plan(MAX_INT_DIGITS), fmt=fmt).steps[0].params["v"] == 10**MAX_INT_DIGITS - 1  # type: ignore[arg-type]
    for digits in (MAX_INT_DIGITS + 1, 5_000):
        with pytest.raises(PlanError, match=f"more than {MAX_INT_DIGITS} digits"):
            parse_plan(plan(digits), fmt=fmt)


def test_an_integer_built_in_python_past_the_limit_is_named_by_path() -> None:
    assert value_problem({"a": [10**400]}, max_depth=8) == "a.0: an integer of more than 300 digits"
    assert value_problem({"a": 1e308, "b": 10**299, "c": True}, max_depth=8) is None


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": SECRET}, "not a valid JSON schema at type"),
        ({"$ref": "#/$defs/none"}, "points at nothing"),
        ({"$ref": "https://example.com/s.json"}, "remote ones are not fetched"),
        ({"maximum": float("inf")}, "answer_schema.maximum: inf is not a finite number"),
        ({"description": "a\x1bb"}, "control character"),
    ],
)
def test_an_answer_schema_that_cannot_be_used_is_refused_without_quoting_it(
    schema: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        check_answer_schema(schema, LIMITS)
    assert SECRET not in str(refused.value)
    assert refused.value.setting == "answer_schema"


def test_a_usable_answer_schema_with_local_refs_passes() -> None:
    check_answer_schema(
        {
            "$defs": {"n": {"type": "integer"}},
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/n"}},
        },
        LIMITS,
    )


def test_session_options_out_of_range_name_the_field_never_the_value() -> None:
    with pytest.raises(ConfigError) as refused:
        input_check.session_options(None, {"concurrency": 10**26})
    assert refused.value.setting == "concurrency"
    assert str(10**26) not in str(refused.value)
    with pytest.raises(ConfigError, match="an unknown option") as unknown:
        input_check.session_options(SessionOptions(), {SECRET: 1})
    assert SECRET not in str(unknown.value)
    assert input_check.session_options({"max_replans": 2}, {"concurrency": 3}).concurrency == 3


def submit_check(case: Hostile) -> None:
    """What the producer checks of a plan case: parsed (a file) or built (the SDK's dict)."""
    if case.text is not None:
        fmt = "yaml" if case.suffix == ".yaml" else "json"
        plan = parse_plan(case.document(), fmt=fmt, limits=LIMITS)
    elif isinstance(case.value(), dict):
        plan = input_check.plan_from_data(case.value(), LIMITS)
    else:
        raise PlanError("not a mapping")  # the SDK refuses it by type (planloop/client.py)
    input_check.stored_plan(plan, LIMITS)


@pytest.mark.parametrize("case", cases(kind="plan"), ids=lambda c: c.name)
def test_every_hostile_plan_is_refused_by_the_producers_check_without_echo(case: Hostile) -> None:
    with pytest.raises(PlanloopError) as refused:
        submit_check(case)
    assert SECRET not in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("case", cases(kind="goal"), ids=lambda c: c.name)
def test_every_hostile_goal_is_refused_by_the_producer_and_by_the_supervisor(case: Hostile) -> None:
    with pytest.raises(InputLimitError) as refused:
        input_check.check_goal(case.value(), [], LIMITS)
    assert SECRET not in str(refused.value)
    stored = input_check.session_refusal(case.value(), [], SessionOptions(), None, LIMITS)
    assert stored is not None
    assert SECRET not in stored


@pytest.mark.parametrize("case", cases(kind="answer_schema"), ids=lambda c: c.name)
def test_every_hostile_answer_schema_is_refused_by_the_supervisor_too(case: Hostile) -> None:
    value = case.value()
    if value is None:  # only a file can carry it (a duplicate key): the CLI's own case
        pytest.skip("a file-only case")
    options = SessionOptions.model_construct(answer_schema=value)  # as read from Redis
    refusal = input_check.session_refusal("goal", [], options, None, LIMITS)
    assert refusal is not None
    assert "answer_schema" in refusal
    assert SECRET not in refusal


def test_a_stored_plan_the_producer_would_refuse_is_refused_by_the_supervisor() -> None:
    deep = (
        '{"steps": [{"id": "s", "tool": "t", "params": {"v": '
        + '{"a": ' * 80
        + "1"
        + "}" * 80
        + "}}]}"
    )
    assert "deeper than 64 levels" in (
        input_check.session_refusal("g", [], SessionOptions(), deep, LIMITS) or ""
    )
    big = Plan.model_validate(one_step(params={"v": "y" * 200_000})).model_dump_json()
    refusal = input_check.session_refusal("g", [], SessionOptions(), big, LIMITS, plan_checked=True)
    assert refusal is not None
    assert "max_plan_bytes" in refusal
    fine = Plan.model_validate(one_step(params={"v": 1})).model_dump_json()
    assert input_check.session_refusal("g", ["c"], SessionOptions(), fine, LIMITS) is None


def test_constraints_are_held_to_the_limits_alone_and_together() -> None:
    input_check.check_goal("g", ["a", "b"], LIMITS)
    with pytest.raises(InputLimitError, match="constraint: control character"):
        input_check.check_goal("g", ["ok", "\x07"], LIMITS)
    half = "h" * (LIMITS.max_input_bytes // 2)  # type: ignore[operator]
    with pytest.raises(InputLimitError, match="bytes together"):
        input_check.check_goal(half, [half, half], LIMITS)
    with pytest.raises(InputLimitError, match="above the limit of 1000"):
        input_check.check_goal("g", ["c"] * 1_001, LIMITS)
