"""Every hostile input of the corpus (tests/hostile_inputs.py) through every entry point that
takes it: the CLI and the SDK from the shipped wheel, the console's HTTP API from
``planloop console``. Each refusal: exit 2 (CLI) or a PlanloopError (SDK) or a 4xx (console),
in one line, without a traceback or the planted secret, and nothing enqueued or appended.
Then what the supervisor does with a session written past the producer."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from tests.console_users import auth_header, login
from tests.hostile_inputs import CLI_ARGS, LIMITS_ENV, SECRET, Hostile, cases, one_step
from tests.integration.conftest import _delete_prefix, wait_ended
from tests.integration.console_process import console_process
from tests.shipped import shipped

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# SessionOptions fields as `planloop submit` flags
FLAGS = {
    "max_cost_usd": "--max-cost-usd",
    "concurrency": "--concurrency",
    "max_rounds": "--max-rounds",
    "max_tokens": "--max-tokens",
}


@pytest.fixture(scope="module")
def settings(test_settings: Settings, redis_client: redis.Redis) -> Iterator[Settings]:
    """This module's own key prefix (no supervisor takes what it submits) and low limits."""
    own = test_settings.model_copy(
        update={
            "key_prefix": f"{test_settings.key_prefix}hostile",
            "max_input_bytes": int(LIMITS_ENV["PLANLOOP_MAX_INPUT_BYTES"]),
            "max_plan_bytes": int(LIMITS_ENV["PLANLOOP_MAX_PLAN_BYTES"]),
        }
    )
    yield own
    _delete_prefix(redis_client, own.key_prefix)


@pytest.fixture(scope="module")
def env(settings: Settings) -> dict[str, str]:
    return shipped().env({**os.environ, **settings.to_env(), **LIMITS_ENV})


@pytest.fixture(scope="module")
def live_sid(settings: Settings) -> str:
    """A pending session nobody runs: what signals and step commands are sent to."""
    producer = Producer.from_settings(settings)
    return producer.submit(parse_plan("steps: [{id: s, tool: bench.echo, params: {value: 1}}]"))


@dataclass(frozen=True)
class Written:
    """What the entry points may have written: sessions handed over, and one's events."""

    inbox: int
    sessions: int
    events: int


def written(client: redis.Redis, settings: Settings, sid: str) -> Written:
    keys = Keys(settings.key_prefix)
    return Written(
        int(client.xlen(keys.inbox)),
        int(client.zcard(keys.sessions)),
        int(client.xlen(keys.events(sid))),
    )


def planloop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shipped().cli(), *args],
        env=env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def cli_args(case: Hostile, sid: str, tmp: Path) -> list[str]:
    plain = tmp / "plain.json"
    plain.write_text(json.dumps(one_step(params={"value": 1})))
    if case.kind == "plan":
        path = tmp / f"{case.name}{case.suffix}"
        path.write_text(case.document())
        return ["submit", str(path), "--no-worker-check"]
    if case.kind == "goal":
        return ["submit", "--goal", case.value(), "--no-worker-check"]
    if case.kind == "options":
        ((name, value),) = case.value().items()
        return ["submit", str(plain), FLAGS[name], str(value), "--no-worker-check"]
    if case.kind == "answer_schema":
        schema = tmp / f"{case.name}.json"
        schema.write_text(case.document())
        return ["submit", str(plain), "--answer-schema", str(schema), "--no-worker-check"]
    return ["signal", sid, case.value()]


def assert_one_clean_line(text: str) -> None:
    assert len(text.strip().splitlines()) == 1, text[:2000]
    assert "Traceback" not in text
    assert SECRET not in text, "the planted secret was echoed"


@pytest.mark.parametrize("case", cases(entry="cli"), ids=lambda c: c.name)
def test_the_cli_refuses_every_hostile_input_with_exit_2_in_one_line(
    case: Hostile,
    env: dict[str, str],
    settings: Settings,
    redis_client: redis.Redis,
    live_sid: str,
    tmp_path: Path,
) -> None:
    before = written(redis_client, settings, live_sid)

    result = planloop(env, *cli_args(case, live_sid, tmp_path))

    assert result.returncode == 2, result.stderr[:2000]
    assert result.stderr.startswith("error: ")
    assert_one_clean_line(result.stderr)
    assert result.stdout == ""
    assert written(redis_client, settings, live_sid) == before


@pytest.mark.parametrize("name", list(CLI_ARGS))
def test_every_commands_bad_flag_or_argument_is_exit_2_in_one_line(
    name: str,
    env: dict[str, str],
    settings: Settings,
    redis_client: redis.Redis,
    live_sid: str,
    tmp_path: Path,
) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(one_step(params={"value": 1})))
    before = written(redis_client, settings, live_sid)

    result = planloop(env, *(a.format(sid=live_sid, plain=plain) for a in CLI_ARGS[name]))

    assert result.returncode == 2, result.stderr[:2000]
    assert result.stderr.startswith("error: "), result.stderr[:2000]
    assert_one_clean_line(result.stderr)
    assert "title" not in result.stderr, "the escape's text was echoed"
    assert result.stdout == ""
    assert written(redis_client, settings, live_sid) == before


@pytest.fixture(scope="module")
def sdk_outcomes(
    env: dict[str, str],
    settings: Settings,
    redis_client: redis.Redis,
    live_sid: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, dict[str, Any]]:
    """The corpus through ``planloop.Client`` in the shipped venv, once for every case."""
    tmp = tmp_path_factory.mktemp("sdk")
    before = written(redis_client, settings, live_sid)
    script = ROOT / "tests" / "hostile_inputs.py"
    result = subprocess.run(
        [str(shipped().python), str(script), "sdk", live_sid, str(tmp)],
        env=env,
        cwd=tmp,  # not the checkout: the wheel's planloop is what is imported
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert written(redis_client, settings, live_sid) == before, "the SDK enqueued something"
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return {line["name"]: line for line in lines}


@pytest.mark.parametrize("case", cases(entry="sdk"), ids=lambda c: c.name)
def test_the_sdk_refuses_every_hostile_input_with_a_planloop_error(
    case: Hostile, sdk_outcomes: dict[str, dict[str, Any]]
) -> None:
    outcome = sdk_outcomes[case.name]

    assert outcome["outcome"] == "refused", outcome
    assert outcome["type"] != "ValidationError"  # pydantic's, raw
    assert "input_value" not in outcome["message"]
    assert_one_clean_line(outcome["message"])


@pytest.fixture(scope="module")
def console(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`planloop console` from the wheel, on a free port, for this module's prefix."""
    overrides = {**settings.to_env(), **LIMITS_ENV}
    with console_process(overrides, tmp_path_factory.mktemp("console")) as running:
        yield running.url


def post(url: str, settings: Settings, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={**auth_header(login("otto")), "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def _signal_body(case: Hostile) -> bytes:
    return json.dumps({"text": case.value()}).encode()


# What the console alone takes: action bodies as raw bytes
CONSOLE_BODIES = {
    "duplicate-key": ("signal", f'{{"text": "hello", "text": "{SECRET}"}}'.encode()),
    "5000-digit-integer": ("signal", b'{"text": "hi", "n": ' + b"1" * 5000 + b"}"),
    "not-json": ("signal", f"text={SECRET}".encode()),
    "note-not-text": ("retry", json.dumps({"step": "s", "note": {"k": SECRET}}).encode()),
    "step-not-text": ("skip", json.dumps({"step": [SECRET]}).encode()),
    "note-escape": ("cancel", json.dumps({"note": f"{SECRET}\x1b]0;x\x07"}).encode()),
    "action-unknown": ("approve", json.dumps({"action": SECRET}).encode()),
    "step-nul": ("approve", json.dumps({"step": f"s\x00{SECRET}"}).encode()),
    "constraint-not-bool": ("signal", json.dumps({"text": "hi", "constraint": SECRET}).encode()),
}
CONSOLE_CASES = [
    *((f"signal-{c.name}", "signal", _signal_body(c)) for c in cases(entry="console")),
    *((name, action, body) for name, (action, body) in CONSOLE_BODIES.items()),
]


@pytest.mark.parametrize(
    ("name", "action", "body"), CONSOLE_CASES, ids=[c[0] for c in CONSOLE_CASES]
)
def test_the_console_refuses_every_hostile_action_body_with_a_4xx_in_one_line(
    console: str,
    settings: Settings,
    redis_client: redis.Redis,
    live_sid: str,
    name: str,
    action: str,
    body: bytes,
) -> None:
    before = written(redis_client, settings, live_sid)

    status, text = post(f"{console}/api/sessions/{live_sid}/{action}", settings, body)

    assert 400 <= status < 500, (status, text[:500])
    error = json.loads(text)["error"]
    assert_one_clean_line(error)
    assert written(redis_client, settings, live_sid) == before
    assert (
        redis_client.hget(Keys(settings.key_prefix).session(live_sid), "cancel_requested") is None
    )


@pytest.fixture(scope="module")
def ended_sid(settings: Settings, redis_client: redis.Redis) -> str:
    """A session marked ended (nobody runs this prefix: its hash is set as an owner would)."""
    producer = Producer.from_settings(settings)
    sid = producer.submit(parse_plan("steps: [{id: s, tool: bench.echo, params: {value: 1}}]"))
    redis_client.hset(Keys(settings.key_prefix).session(sid), "status", "completed")
    return sid


@pytest.mark.parametrize(
    "args",
    [
        ("signal", "{sid}", "hello"),
        ("signal", "{sid}", "hello", "--signal"),
        ("retry", "{sid}", "s"),
        ("skip", "{sid}", "s"),
        ("approve", "{sid}", "--step", "s"),
        ("approve", "{sid}", "--action", "continue"),
        ("cancel", "{sid}"),
    ],
    ids=lambda a: "-".join(p for p in a if p != "{sid}"),
)
def test_a_command_to_an_ended_session_is_exit_2_naming_why(
    env: dict[str, str],
    settings: Settings,
    redis_client: redis.Redis,
    ended_sid: str,
    args: tuple[str, ...],
) -> None:
    before = written(redis_client, settings, ended_sid)

    result = planloop(env, *(a.format(sid=ended_sid) for a in args))

    assert result.returncode == 2, result.stderr
    assert_one_clean_line(result.stderr)
    assert f"session {ended_sid} has ended (completed)" in result.stderr
    assert written(redis_client, settings, ended_sid) == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("retry", "{sid}", "nope"), "the session has no such step (its steps: s)"),
        (("skip", "{sid}", "nope"), "the session has no such step"),
        (("retry", "{sid}", "s"), "it is pending; retry applies to a failed or interrupted step"),
        (("approve", "{sid}", "--step", "s"), "it does not require approval"),
        (("signal", "no-such-session", "hi"), "no session 'no-such-session'"),
    ],
    ids=["retry-unknown", "skip-unknown", "retry-pending", "approve-unmarked", "signal-unknown"],
)
def test_a_step_command_that_cannot_apply_is_exit_2_naming_why(
    env: dict[str, str], live_sid: str, args: tuple[str, ...], says: str
) -> None:
    result = planloop(env, *(a.format(sid=live_sid) for a in args))

    assert result.returncode == 2, result.stderr
    assert_one_clean_line(result.stderr)
    assert says in result.stderr


def test_the_supervisor_ends_a_session_written_past_the_producer_failed_before_it_runs(
    stack: object, producer: Producer, redis_client: redis.Redis, test_settings: Settings
) -> None:
    """A session whose answer schema the producer would refuse (a dangling $ref), written
    straight into Redis: the supervisor refuses it at once (no crash loop), nothing runs."""
    sid = "hostile-" + os.urandom(4).hex()
    plan = parse_plan("steps: [{id: s, tool: bench.echo, params: {value: 1}}]")
    producer.state.create_session(
        sid,
        plan_json=plan.model_dump_json(),
        goal=f"hostile {SECRET}",
        options=SessionOptions.model_construct(answer_schema={"$ref": "#/nowhere"}),
    )

    record = wait_ended(producer, sid, 60)

    assert record.status == SessionStatus.FAILED
    assert "refused before it started" in record.error
    assert "answer_schema" in record.error
    assert SECRET not in record.error
    session = redis_client.hgetall(Keys(test_settings.key_prefix).session(sid))
    assert "crashes" not in session, "the refusal was counted as a crash"
    assert producer.state.steps(sid, ["s"])["s"].attempt == 0, "a step ran"


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"concurrency": 10**26}, "options.concurrency"),
        ({"max_rounds": f"many {SECRET}"}, "options.max_rounds"),
    ],
    ids=["concurrency-1e26", "rounds-not-a-number"],
)
def test_the_supervisor_ends_a_session_whose_stored_fields_do_not_parse_failed_at_once(
    stack: object,
    producer: Producer,
    redis_client: redis.Redis,
    test_settings: Settings,
    options: dict[str, Any],
    names: str,
) -> None:
    """Options an old client wrote past the checks (out of the model's bounds, not even a
    number): the record does not load, and the supervisor ends the session failed with a
    reason naming the field, at once (no crash counted, no cool-off loop), nothing runs."""
    sid = "hostile-" + os.urandom(4).hex()
    plan = parse_plan("steps: [{id: s, tool: bench.echo, params: {value: 1}}]")
    with warnings.catch_warnings():  # pydantic warns about the value it is made to write
        warnings.simplefilter("ignore")
        producer.state.create_session(
            sid,
            plan_json=plan.model_dump_json(),
            goal="hostile",
            options=SessionOptions.model_construct(**options),
        )

    record = redis_client.hgetall(Keys(test_settings.key_prefix).session(sid))
    deadline = time.monotonic() + 60
    while record.get("status") not in ("failed", "completed", "cancelled", "aborted"):
        assert time.monotonic() < deadline, record
        time.sleep(0.1)
        record = redis_client.hgetall(Keys(test_settings.key_prefix).session(sid))

    assert record["status"] == "failed"
    assert "cannot be loaded: its stored fields break the input check" in record["error"]
    assert names in record["error"]
    assert SECRET not in record["error"]
    assert "crashes" not in record, "the refusal was counted as a crash"
    assert producer.state.steps(sid, ["s"])["s"].attempt == 0, "a step ran"
