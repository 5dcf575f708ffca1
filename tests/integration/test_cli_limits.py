"""Hostile or careless input through the ``planloop`` command line, as a user runs it.

Every refusal: exit code 2, one line naming the problem and where, nothing enqueued (the inbox
stream keeps its length). Every value just inside a limit: accepted, and what the producer
stored parses back through the supervisor's reading path (``Plan.model_validate_json``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.errors import InputLimitError, PlanValidationError
from planloop.core.keys import Keys
from planloop.planner.plan import Plan, load_plan
from planloop.producer.client import Producer
from tests.integration.conftest import _delete_prefix
from tests.shipped import shipped

pytestmark = pytest.mark.integration


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


@pytest.fixture(scope="module")
def settings(test_settings: Settings, redis_client: redis.Redis) -> Iterator[Settings]:
    """This module's own key prefix: no supervisor of the run picks up what it submits."""
    own = test_settings.model_copy(update={"key_prefix": f"{test_settings.key_prefix}lim"})
    yield own
    _delete_prefix(redis_client, own.key_prefix)


def planloop(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    if args[:1] == ("submit",):  # no worker serves this module's prefix: none is checked for
        args = (*args, "--no-worker-check")
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**os.environ, **settings.to_env(), **(env or {})}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def inbox_length(client: redis.Redis, settings: Settings) -> int:
    return int(client.xlen(Keys(settings.key_prefix).inbox))


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def echo_plan(**step: Any) -> str:
    return json.dumps({"goal": "g", "steps": [{"id": "s", "tool": "bench.echo", **step}]})


def deep_json(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def deep_yaml(depth: int) -> str:
    return "steps: [{id: s, tool: bench.echo, params: {value: " + "[" * depth + "]" * depth + "}}]"


def malformed_5mb() -> str:
    line = "  - {id: s%d, tool: bench.echo, params: {value: [1, 2, 3], note: hello}}\n"
    return "steps:\n" + "".join(line % i for i in range(72_000)) + "  - {id: broken, tool: [\n"


REFUSED_FILES = [
    (
        "deep-1000.json",
        lambda: echo_plan(params="PARAMS").replace('"PARAMS"', deep_json(1_000)),
        "nested too deeply",
    ),
    ("deep-400.json", lambda: echo_plan(params={"value": nested(400)}), "deeper than 64 levels"),
    ("deep-220.yaml", lambda: deep_yaml(220), "deeper than 64 levels"),
    ("deep-65.json", lambda: echo_plan(params=nested(65)), "step 's': params.a.a"),
    ("bomb.yaml", lambda: BILLION_LAUGHS, "aliases expand the document"),
    ("malformed.yaml", malformed_5mb, "bad YAML at line 72003"),
    ("timeout.json", lambda: echo_plan(timeout_s=1e300), "above the limit of 3600 s"),
    ("timeout-edge.json", lambda: echo_plan(timeout_s=3600.5), "timeout_s 3600.5 s is above"),
    ("nan-timeout.json", lambda: echo_plan().replace('"s",', '"s", "timeout_s": NaN,'), "nan"),
    ("nan-param.json", lambda: echo_plan(params={"value": [1, float("nan")]}), "params.value.1"),
    ("inf-expect.json", lambda: echo_plan(expect=[{"value": float("inf")}]), "inf is not"),
    ("nul-goal.json", lambda: echo_plan().replace('"g"', '"a\\u0000b"'), "goal: control"),
    ("esc-param.json", lambda: echo_plan(params={"value": "\x1b[31m"}), "'\\x1b'"),
]


@pytest.mark.parametrize(
    ("name", "make", "expected"), REFUSED_FILES, ids=[r[0] for r in REFUSED_FILES]
)
def test_a_plan_file_past_a_limit_exits_2_with_one_line_and_enqueues_nothing(
    tmp_path: Path,
    settings: Settings,
    redis_client: redis.Redis,
    name: str,
    make: Any,
    expected: str,
) -> None:
    path = tmp_path / name
    path.write_text(make())
    before = inbox_length(redis_client, settings)

    result = planloop(settings, "submit", str(path))

    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {path}: ")
    assert result.stderr.splitlines() == [result.stderr.strip()]  # one line
    assert result.stderr.strip().endswith("(nothing was submitted)")
    assert result.stdout == ""
    assert inbox_length(redis_client, settings) == before


def test_a_file_above_max_input_bytes_exits_2(
    tmp_path: Path, settings: Settings, redis_client: redis.Redis
) -> None:
    path = tmp_path / "big.json"
    path.write_text(echo_plan(params={"value": "x" * 2_000}))
    before = inbox_length(redis_client, settings)

    result = planloop(settings, "submit", str(path), env={"PLANLOOP_MAX_INPUT_BYTES": "1000"})

    assert result.returncode == 2
    assert "above the limit of 1000 (max_input_bytes)" in result.stderr
    assert inbox_length(redis_client, settings) == before


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "examples/diamond.yaml", "--concurrency", "0"],
        ["submit", "examples/diamond.yaml", "--max-replans", "-1"],
        ["status", "--limit", "0"],
        ["worker", "--concurrency", "0"],
        ["worker", "--pool", "gevent"],
        ["flower", "--port", "70000"],
    ],
    ids=["concurrency-0", "max-replans", "status-limit", "worker-0", "worker-pool", "port"],
)
def test_an_out_of_range_option_exits_2_naming_it(
    settings: Settings, redis_client: redis.Redis, args: list[str]
) -> None:
    before = inbox_length(redis_client, settings)

    result = planloop(settings, *args)

    assert result.returncode == 2
    assert "Invalid value for" in result.stderr
    assert args[-2] in result.stderr
    assert "Traceback" not in result.stderr
    assert inbox_length(redis_client, settings) == before


def test_a_goal_with_a_control_character_exits_2(
    settings: Settings, redis_client: redis.Redis
) -> None:
    before = inbox_length(redis_client, settings)

    result = planloop(settings, "submit", "--goal", "buy \x01 things")

    assert result.returncode == 2
    assert "'--goal': control character '\\x01'" in result.stderr
    assert inbox_length(redis_client, settings) == before


def test_values_just_inside_every_limit_are_accepted_and_read_back_by_the_supervisor_path(
    tmp_path: Path, settings: Settings, redis_client: redis.Redis
) -> None:
    path = tmp_path / "edge.json"
    path.write_text(
        json.dumps(
            {
                "goal": "tabs\tand\nnewlines are text",
                "steps": [
                    {
                        "id": "s",
                        "tool": "bench.echo",
                        "params": {"value": nested(63)},  # params itself is level 1: 64
                        "timeout_s": 3600,
                        "expect": [{"path": "value", "op": "exists", "value": nested(64)}],
                        "compensate": {"tool": "bench.echo", "params": {"value": nested(63)}},
                    },
                    {"id": "t", "tool": "bench.echo", "params": {"value": 1e308}},
                ],
            }
        )
    )
    before = inbox_length(redis_client, settings)

    result = planloop(settings, "submit", str(path))

    assert result.returncode == 0, result.stderr
    sid = result.stdout.strip()
    assert inbox_length(redis_client, settings) == before + 1
    stored = redis_client.get(Keys(settings.key_prefix).plan(sid, 1))
    assert isinstance(stored, bytes | str)
    assert Plan.model_validate_json(stored) == load_plan(path)


def test_a_signal_with_a_control_character_exits_2_and_appends_nothing(
    tmp_path: Path, settings: Settings, redis_client: redis.Redis
) -> None:
    path = tmp_path / "ok.json"
    path.write_text(echo_plan(params={"value": 1}))
    submitted = planloop(settings, "submit", str(path))
    assert submitted.returncode == 0, submitted.stderr
    sid = submitted.stdout.strip()
    events = Keys(settings.key_prefix).events(sid)
    before = int(redis_client.xlen(events))

    result = planloop(settings, "signal", sid, "budget \x1b[2J is 5k")

    assert result.returncode == 2
    assert "'TEXT': control character '\\x1b'" in result.stderr
    assert int(redis_client.xlen(events)) == before


def test_a_file_of_exactly_max_input_bytes_with_aliases_in_budget_is_accepted_and_read_back(
    tmp_path: Path, settings: Settings, redis_client: redis.Redis
) -> None:
    text = (
        "goal: aliases within the budget\n"
        "steps:\n"
        "  - {id: a, tool: bench.echo, params: {value: &v [1, 2, 3]}}\n"
        "  - {id: b, tool: bench.echo, params: {value: [*v, *v]}, dependencies: [a]}\n"
    )
    path = tmp_path / "aliases.yaml"
    path.write_text(text)
    env = {"PLANLOOP_MAX_INPUT_BYTES": str(len(text)), "PLANLOOP_MAX_YAML_ALIAS_NODES": "8"}

    result = planloop(settings, "submit", str(path), env=env)

    assert result.returncode == 0, result.stderr
    stored = redis_client.get(Keys(settings.key_prefix).plan(result.stdout.strip(), 1))
    assert isinstance(stored, bytes | str)
    assert Plan.model_validate_json(stored).steps[1].params == {"value": [[1, 2, 3], [1, 2, 3]]}

    tighter = {"PLANLOOP_MAX_INPUT_BYTES": str(len(text) - 1)}
    assert planloop(settings, "submit", str(path), env=tighter).returncode == 2
    fewer = {"PLANLOOP_MAX_YAML_ALIAS_NODES": "7"}
    refused = planloop(settings, "submit", str(path), env=fewer)
    assert refused.returncode == 2
    assert "expand the document by 8 nodes, above the limit of 7" in refused.stderr


def test_a_plan_built_in_python_is_held_to_the_deployments_limits_at_submit(
    settings: Settings, redis_client: redis.Redis
) -> None:
    producer = Producer.from_settings(settings)
    deep = Plan.model_validate(  # under the model's ceiling (128), over the setting (64)
        {"steps": [{"id": "s", "tool": "bench.echo", "params": {"value": nested(100)}}]}
    )
    slow = Plan.model_validate(
        {"steps": [{"id": "s", "tool": "bench.echo", "params": {"value": 1}, "timeout_s": 7200}]}
    )
    before = inbox_length(redis_client, settings)

    with pytest.raises(PlanValidationError, match=r"step 's': params\.value\.a.*deeper than 64"):
        producer.submit(deep)
    with pytest.raises(PlanValidationError, match="timeout_s 7200 s is above the limit of 3600"):
        producer.submit(slow)
    with pytest.raises(InputLimitError, match="signal text: control character"):
        producer.signal("no-such-session", "a\x00b")

    assert inbox_length(redis_client, settings) == before
