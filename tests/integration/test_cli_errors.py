"""Clear errors everywhere: every bad setting or option is exit 2 in one
line naming it; retry/skip/approve that cannot apply are exit 2 naming the step and its
state, with nothing appended to the session's stream."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import planloop
from planloop.config.settings import Settings
from planloop.core.hot_state import HotState
from planloop.core.models import SessionStatus, StepStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.integration.conftest import wait_ended
from tests.shipped import shipped

pytestmark = pytest.mark.integration

GATED = """
goal: one step done, one waiting for a person
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: gate, tool: bench.echo, params: {value: 2}, dependencies: [a], requires_approval: true}
  - {id: last, tool: bench.echo, params: {value: 3}, dependencies: [gate], requires_approval: true}
"""


def cli(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``planloop ARGS`` as a user runs it, with exactly these PLANLOOP_* variables."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PLANLOOP_")}
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**base, **env}),
        cwd=cwd or shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``error:`` line of a command that exited 2 (asserted)."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# --- bad settings -------------------------------------------------------------------------
@pytest.mark.parametrize("command", [("status",), ("worker",), ("supervisor",), ("up",)])
def test_a_redis_url_that_is_not_one_is_exit_2_naming_it(command: tuple[str, ...]) -> None:
    line = one_error_line(cli({"PLANLOOP_REDIS_URL": "notaurl"}, *command))
    assert line.startswith("error: PLANLOOP_REDIS_URL='notaurl' is not a Redis URL")


@pytest.mark.parametrize("command", [("worker",), ("supervisor",), ("lessons",), ("db", "current")])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo://db.example/x", "unsupported database scheme 'foo'"),
        ("postgresql+psycopg2://u@127.0.0.1/x", "the psycopg2 driver is not installed"),
    ],
)
def test_a_database_url_the_record_cannot_use_is_exit_2_naming_it(
    command: tuple[str, ...], url: str, says: str
) -> None:
    line = one_error_line(cli({"PLANLOOP_DATABASE_URL": url}, *command))
    assert line.startswith(f"error: PLANLOOP_DATABASE_URL={url!r}")
    assert says in line


def test_postgres_without_its_driver_says_how_to_install_it(tmp_path: Path) -> None:
    # psycopg is installed here: a package of that name that cannot be imported, ahead of it
    # on the path, is what a venv without the postgres extra looks like to the driver check
    shim = tmp_path / "shadow" / "psycopg"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'psycopg'\")\n")
    env = {
        "PLANLOOP_DATABASE_URL": "postgresql+psycopg://planloop@127.0.0.1:5432/planloop",
        "PYTHONPATH": os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")]),
    }
    line = one_error_line(cli(env, "supervisor"))
    assert "PLANLOOP_DATABASE_URL=" in line
    assert "the psycopg driver is not installed" in line
    assert line.endswith("pip install 'planloop[postgres]'")


def test_a_field_out_of_range_is_exit_2_naming_the_variable() -> None:
    line = one_error_line(cli({"PLANLOOP_FLOWER_PORT": "70000"}, "flower"))
    assert "PLANLOOP_FLOWER_PORT: Input should be less than or equal to 65535" in line


# --- busy ports -----------------------------------------------------------------------------
@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


@pytest.mark.parametrize("server", ["flower", "console"])
def test_a_busy_port_chosen_by_the_option_is_exit_2_naming_port_and_option(
    server: str, busy_port: int, env_overrides: dict[str, str]
) -> None:
    line = one_error_line(cli(env_overrides, server, "--port", str(busy_port)))
    assert line.startswith(f"error: port {busy_port} on 127.0.0.1 is in use (chosen by --port)")


@pytest.mark.parametrize(
    ("server", "setting"),
    [("flower", "PLANLOOP_FLOWER_PORT"), ("console", "PLANLOOP_CONSOLE_PORT")],
)
def test_a_busy_port_chosen_by_the_setting_is_exit_2_naming_port_and_setting(
    server: str, setting: str, busy_port: int, env_overrides: dict[str, str]
) -> None:
    result = cli({**env_overrides, setting: str(busy_port)}, server)
    line = one_error_line(result)
    assert f"port {busy_port} on 127.0.0.1 is in use (chosen by {setting})" in line
    assert "console on" not in result.stdout  # nothing claims to serve


# --- retry, skip and approve that cannot apply ----------------------------------------------
def start_gated(producer: Producer, hot_state: HotState) -> str:
    """A session whose step ``a`` completed and whose ``gate`` waits for an approval."""
    sid = producer.submit(parse_plan(GATED))

    def waiting() -> bool:
        steps = hot_state.steps(sid, ["a", "gate"])
        return steps["a"].status == StepStatus.COMPLETED and steps["gate"].note == (
            "awaiting approval"
        )

    wait_for(waiting, 30, "step a to complete and gate to wait for approval")
    return sid


@pytest.fixture(scope="module")
def gated(stack: Stack, producer: Producer, hot_state: HotState) -> Iterator[str]:
    """One waiting session for every refusal below (none of them changes it)."""
    sid = start_gated(producer, hot_state)
    yield sid
    producer.cancel(sid, "test over")  # it would wait for its approval for ever


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("retry", "{sid}", "a"), "cannot retry step 'a' of session {sid}: it is completed"),
        (("skip", "{sid}", "a"), "cannot skip step 'a' of session {sid}: it is completed"),
        (("approve", "{sid}", "--step", "a"), "cannot approve step 'a' of session {sid}: it is "),
        (("retry", "{sid}", "gate"), "cannot retry step 'gate' of session {sid}: it is pending"),
        (
            ("retry", "{sid}", "nope"),
            "cannot retry step 'nope' of session {sid}: the session has no such step "
            "(its steps: a, gate, last)",
        ),
        (("skip", "{sid}", "nope"), "cannot skip step 'nope' of session {sid}: the session has"),
        (("approve", "{sid}", "--step", "nope"), "cannot approve step 'nope' of session {sid}"),
        (("approve", "{sid}", "--action", "continue"), "waits for no decision"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else None,
)
def test_a_command_that_cannot_apply_is_exit_2_and_appends_nothing(
    gated: str,
    env_overrides: dict[str, str],
    hot_state: HotState,
    args: tuple[str, ...],
    says: str,
) -> None:
    stream = hot_state.keys.events(gated)
    before = hot_state.r.xlen(stream)

    line = one_error_line(cli(env_overrides, *(a.format(sid=gated) for a in args)))

    assert says.format(sid=gated) in line
    assert line.endswith("(nothing was sent)")
    assert hot_state.r.xlen(stream) == before, "an event was appended"


def test_the_sdk_raises_the_refusal_with_step_and_state(
    stack: Stack, producer: Producer, test_settings: Settings, hot_state: HotState
) -> None:
    gated = start_gated(producer, hot_state)
    stream = hot_state.keys.events(gated)
    before = hot_state.r.xlen(stream)
    with planloop.Client(test_settings) as client:
        with pytest.raises(planloop.CommandRefusedError) as retried:
            client.retry_step(gated, "a")
        with pytest.raises(planloop.CommandRefusedError) as approved:
            client.approve(gated, step="nope")

        assert (retried.value.step_id, retried.value.state) == ("a", "completed")
        assert (approved.value.step_id, approved.value.state) == ("nope", None)
        assert isinstance(retried.value, planloop.PlanloopError)
        assert hot_state.r.xlen(stream) == before

        # what applies still goes through, and then the same approval no longer applies
        # (step 'last' keeps the session waiting, so the refusal is the step's, not an end's)
        client.approve(gated, step="gate", note="go")
        wait_for(lambda: "gate" in producer.session(gated).approved, 30, "the owner to apply it")
        with pytest.raises(planloop.CommandRefusedError, match="step 'gate'"):
            client.approve(gated, step="gate")
        client.approve(gated, step="last")
        report = client.wait(gated, timeout_s=30)
    assert report.status == SessionStatus.COMPLETED


def test_a_command_on_an_ended_session_is_exit_2(
    stack: Stack, producer: Producer, env_overrides: dict[str, str]
) -> None:
    sid = producer.submit(parse_plan("steps: [{id: a, tool: bench.echo, params: {value: 1}}]"))
    assert wait_ended(producer, sid, 30).status == SessionStatus.COMPLETED

    line = one_error_line(cli(env_overrides, "skip", sid, "a"))
    assert f"session {sid} has ended (completed)" in line
