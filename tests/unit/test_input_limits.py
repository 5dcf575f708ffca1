"""Input limits: each one just inside passes and reads back as the supervisor reads it; just
outside is refused with a message that names the problem and where."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from planloop.config.settings import MAX_NESTING_DEPTH_CEILING, Settings
from planloop.core.errors import PlanLoadError
from planloop.core.input_limits import DEFAULTS, MAX_FALLBACK_DEPTH, InputLimits, value_problem
from planloop.core.models import Event, EventType
from planloop.core.tools import load_tools
from planloop.planner.dag import BitIndex, ancestor_bits, reachable
from planloop.planner.plan import Plan, load_plan, parse_plan
from planloop.planner.validation import all_errors, validate_plan

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
steps: [{id: a, tool: bench.echo, params: {value: *i}}]
"""


def nested(depth: int) -> Any:
    """A value ``depth`` levels deep (``{}`` is one level)."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def plan_json(**step: Any) -> str:
    return json.dumps({"goal": "g", "steps": [{"id": "s", "tool": "bench.echo", **step}]})


def read_back(plan: Plan) -> Plan:
    """What the supervisor reads: ``Plan.model_validate_json`` of the stored JSON, no context."""
    return Plan.model_validate_json(plan.model_dump_json())


def refusal(text: str, fmt: str = "json", limits: InputLimits = DEFAULTS) -> str:
    with pytest.raises(PlanLoadError) as caught:
        parse_plan(text, fmt=fmt, source="plan", limits=limits)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- just inside: accepted, and the supervisor's reading path parses it back ----------------
@pytest.mark.parametrize(
    "step",
    [
        {"params": {"value": nested(DEFAULTS.max_nesting_depth - 1)}},
        {"compensate": {"tool": "bench.echo", "params": nested(DEFAULTS.max_nesting_depth)}},
        {"expect": [{"path": "value", "op": "eq", "value": nested(64)}]},
        {"timeout_s": DEFAULTS.max_step_timeout_s},
        {"params": {"value": "tab\there\nnewline\r", "big": 1e308, "int": 10**30}},
        {"title": "ünïcode ✓ 漢字 emoji 🎉"},
    ],
    ids=["params-depth", "compensate-depth", "expect-depth", "timeout", "texts", "unicode"],
)
def test_a_value_just_inside_a_limit_is_accepted_and_reads_back(step: dict[str, Any]) -> None:
    plan = parse_plan(plan_json(**step), fmt="json")
    assert read_back(plan) == plan


def test_the_ceilings_keep_the_stored_json_under_the_json_parsers_recursion_limit() -> None:
    deepest: dict[str, Any] = {
        "id": "f",
        "tool": "bench.echo",
        "params": nested(MAX_NESTING_DEPTH_CEILING),
        "expect": [{"value": nested(MAX_NESTING_DEPTH_CEILING)}],
    }
    for level in range(MAX_FALLBACK_DEPTH):
        deepest = {"id": f"f{level}", "tool": "bench.echo", "fallback": [deepest]}
    text = json.dumps({"steps": [deepest]})
    ceilings = InputLimits()
    plan = parse_plan(text, fmt="json", limits=ceilings)
    assert read_back(plan) == plan


def test_a_yaml_alias_within_the_budget_is_expanded() -> None:
    text = "steps:\n- &s {id: a, tool: bench.echo, params: {value: [1, 2, 3]}}\n"
    text += "- {id: b, tool: bench.echo, params: {value: [*s, *s]}}\n"
    plan = parse_plan(text, limits=InputLimits(max_yaml_alias_nodes=2 * 12))
    assert plan.steps[1].params["value"][0]["id"] == "a"
    assert "max_yaml_alias_nodes" in refusal(text, "yaml", InputLimits(max_yaml_alias_nodes=23))


# --- just outside: refused with a one-line message naming the problem and where -------------
def test_params_nested_past_the_limit_name_the_step_and_the_path() -> None:
    message = refusal(plan_json(params={"value": nested(DEFAULTS.max_nesting_depth)}))
    assert "step 's'" in message
    assert "params.value.a.a" in message
    assert "nested deeper than 64 levels (max_nesting_depth)" in message


@pytest.mark.parametrize("depth", [220, 400, 1_000, 50_000])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_absurd_nesting_is_refused_without_a_recursion_error(depth: int, fmt: str) -> None:
    if fmt == "json":
        text = '{"steps": [{"id": "s", "tool": "t", "params": ' + "[" * depth + "]" * depth + "}]}"
    else:
        text = "steps: [{id: s, tool: t, params: {v: " + "[" * depth + "]" * depth + "}}]"
    assert "nest" in refusal(text, fmt)


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"timeout_s": 3600.5}, "timeout_s 3600.5 s is above the limit of 3600 s"),
        ({"timeout_s": 1e300}, "above the limit of 3600 s (max_step_timeout_s)"),
        ({"params": {"x": [1, math.nan]}}, "params.x.1: nan is not a finite number"),
        ({"params": {"x": math.inf}}, "params.x: inf is not a finite number"),
        ({"expect": [{"value": -math.inf}]}, "expect.0.value: -inf is not a finite number"),
        ({"params": {"x": "a\x00b"}}, "params.x: control character '\\x00'"),
        ({"params": {"k\x1b": 1}}, "control character '\\x1b' in a key"),
        ({"title": "bell\x07"}, "title: control character '\\x07'"),
        ({"instruction": "lone \ud800 surrogate"}, "control character '\\ud800'"),
    ],
    ids=["timeout", "timeout-1e300", "nan", "inf", "expect-inf", "nul", "esc-key", "bel", "surr"],
)
def test_a_value_just_outside_a_limit_is_refused(step: dict[str, Any], expected: str) -> None:
    message = refusal(plan_json(**step))
    assert "step 's'" in message
    assert expected in message


def test_nan_literals_in_json_and_yaml_are_refused() -> None:
    text = '{"steps": [{"id": "s", "tool": "t", "params": {"x": NaN}}]}'
    assert "params.x: nan is not a finite number" in refusal(text)
    text = "steps: [{id: s, tool: t, params: {x: .inf}, timeout_s: .nan}]"
    assert "is not a finite number" in refusal(text, "yaml")


def test_a_goal_or_constraint_with_a_control_character_is_refused() -> None:
    text = json.dumps({"goal": "a\x00b", "steps": [{"id": "s", "tool": "t"}]})
    assert "goal: control character '\\x00'" in refusal(text)
    text = json.dumps({"constraints": ["ok", "b\x01"], "steps": [{"id": "s", "tool": "t"}]})
    assert "constraints.1: control character '\\x01'" in refusal(text)


def test_fallbacks_nested_past_the_limit_are_refused() -> None:
    step: dict[str, Any] = {"id": "leaf", "tool": "t"}
    for level in range(MAX_FALLBACK_DEPTH + 1):
        step = {"id": f"f{level}", "tool": "t", "fallback": [step]}
    message = refusal(json.dumps({"steps": [step]}))
    assert f"fallback sub-graphs nested more than {MAX_FALLBACK_DEPTH} levels" in message


def test_a_yaml_alias_bomb_is_refused() -> None:
    message = refusal(BILLION_LAUGHS, "yaml")
    assert "aliases expand the document" in message
    assert "max_yaml_alias_nodes" in message


def test_a_recursive_yaml_alias_is_refused() -> None:
    message = refusal("steps: &s [{id: a, tool: t, params: {x: *s}}]", "yaml")
    assert "recursive alias" in message


def test_a_large_malformed_yaml_is_refused_at_its_line() -> None:
    line = "  - {id: s%d, tool: bench.echo, params: {value: [1, 2, 3]}}\n"
    text = "steps:\n" + "".join(line % i for i in range(20_000)) + "  - {id: broken, tool: [\n"
    assert "bad YAML at line 20003" in refusal(text, "yaml")


def test_a_file_above_max_input_bytes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    text = plan_json(params={"value": "x" * 100})
    path.write_text(text)
    assert load_plan(path, limits=InputLimits(max_input_bytes=len(text))).steps[0].id == "s"
    with pytest.raises(PlanLoadError, match=r"above the limit of \d+ \(max_input_bytes\)"):
        load_plan(path, limits=InputLimits(max_input_bytes=len(text) - 1))


def test_a_plan_built_in_python_gets_the_ceilings_and_context_limits_get_the_settings() -> None:
    data = {"steps": [{"id": "s", "tool": "t", "params": {"v": nested(100)}}]}
    assert Plan.model_validate(data).steps[0].id == "s"  # under the ceiling of 128
    with pytest.raises(ValidationError, match="nested deeper than 64 levels"):
        Plan.model_validate(data, context={"limits": DEFAULTS})


def test_value_problem_counts_levels_and_names_the_path() -> None:
    assert value_problem({"a": [1, 2]}, max_depth=2) is None
    assert value_problem({"a": [[1]]}, max_depth=2) == "a.0: nested deeper than 2 levels " + (
        "(max_nesting_depth)"
    )
    assert value_problem("x\ty\nz\r", max_depth=0) is None
    assert value_problem(("tuple", "\x7f"), max_depth=1) == "1: control character '\\x7f' in text"


# --- settings and events -------------------------------------------------------------------
def test_settings_cannot_raise_the_limits_past_the_ceilings() -> None:
    with pytest.raises(ValidationError, match="max_nesting_depth"):
        Settings(max_nesting_depth=MAX_NESTING_DEPTH_CEILING + 1)
    with pytest.raises(ValidationError, match="max_step_timeout_s"):
        Settings(max_step_timeout_s=1e12)
    assert DEFAULTS.max_input_bytes == 8 * 1024 * 1024


@pytest.mark.parametrize("when", ["nan", "inf", "-inf"])
def test_an_event_time_must_be_finite(when: str) -> None:
    with pytest.raises(ValidationError, match="occurred_at"):
        Event(type=EventType.EXTERNAL_SIGNAL, occurred_at=float(when))
    fields = Event(type=EventType.EXTERNAL_SIGNAL).to_fields() | {"occurred_at": when}
    with pytest.raises(ValidationError, match="occurred_at"):
        Event.from_fields(fields)


# --- linear validation ---------------------------------------------------------------------
def test_ancestor_bitsets_equal_a_graph_walk_on_random_dags() -> None:
    rng = random.Random(3)
    for _ in range(50):
        size = rng.randrange(1, 40)
        graph = {
            f"n{i}": [f"n{j}" for j in rng.sample(range(i), min(i, rng.randrange(4)))]
            for i in range(size)
        }
        graph[f"n{size}"] = ["outside", "n0"]
        index = BitIndex()
        bits = ancestor_bits(graph, index, needed=set(graph))
        assert bits is not None
        for node, deps in graph.items():
            assert set(index.members(bits[node])) == reachable(deps, graph)


def test_ancestor_bitsets_report_a_cycle_as_none() -> None:
    assert ancestor_bits({"a": ["b"], "b": ["a"]}, BitIndex(), needed={"a"}) is None


def test_a_20000_step_chain_with_references_validates() -> None:
    """Quadratic validation took 121 s here; the per-test timeout is what fails it."""
    steps = [{"id": "s0", "tool": "bench.echo", "params": {"value": 0}}]
    for i in range(1, 20_000):
        steps.append(
            {
                "id": f"s{i}",
                "tool": "bench.echo",
                "params": {"value": f"{{{{s{i - 1}.output.value}}}}"},
                "dependencies": [f"s{i - 1}"],
            }
        )
    plan = Plan.model_validate({"steps": steps})
    tools = load_tools(["planloop.workers.toolsets.bench"])
    validate_plan(plan, tools)
    broken = plan.model_copy(
        update={
            "steps": [
                *plan.steps[:-1],
                plan.steps[-1].model_copy(update={"params": {"value": "{{s19999.output}}"}}),
            ]
        }
    )
    errors = all_errors(broken, tools)
    assert [e.step_id for e in errors] == ["s19999"]
    assert "references 's19999' which is not among its dependencies" in str(errors[0])
