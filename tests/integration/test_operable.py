"""Errors a person can act on: exit codes, one line for an unreachable
service, tools advertised by live workers, ``status --json``, JSON logs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from planloop.config.settings import Settings
from planloop.core.heartbeat import live_workers
from planloop.core.models import SessionStatus, StepStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from planloop.workers.toolsets import BENCH_TOOLS
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, wait_ended
from tests.integration.test_cli import DIAMOND, planloop
from tests.shipped import shipped

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UNREACHABLE_REDIS = "redis://:hunter2@127.0.0.1:1/0"

FAILING = """
goal: a critical step fails for good
steps:
  - {id: boom, tool: bench.sleep, params: {seconds: 0, fail_attempts: [1]}, critical: true,
     max_retries: 0}
"""

SLOW = """
goal: sleep a while, then echo
steps:
  - {id: nap, tool: bench.sleep, params: {seconds: 10}}
  - {id: after, tool: bench.echo, params: {value: 1}, dependencies: [nap]}
"""


def cli(env: dict[str, str], *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``planloop ARGS`` with exactly these PLANLOOP_* variables (none of the test run's)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PLANLOOP_")}
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**base, **env}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


# --- exit 3: an unreachable service ---------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("status", "--json"),
        ("submit", str(DIAMOND)),
        ("show", "20260101-000000-abcdef12"),
        ("watch", "20260101-000000-abcdef12"),
        ("cancel", "20260101-000000-abcdef12"),
        ("signal", "20260101-000000-abcdef12", "budget is 5k"),
        ("approve", "20260101-000000-abcdef12", "--step", "a"),
    ],
    ids=lambda a: a[0] + ("-json" if "--json" in a else ""),
)
def test_redis_unreachable_is_one_line_naming_the_url_and_exit_3(args: tuple[str, ...]) -> None:
    result = cli(
        {"PLANLOOP_REDIS_URL": UNREACHABLE_REDIS, "PLANLOOP_TOOL_MODULES": BENCH_TOOLS}, *args
    )

    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot reach Redis at redis://:***@127.0.0.1:1/0")
    assert "PLANLOOP_REDIS_URL" in lines[0]
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_database_unreachable_is_one_line_and_exit_3(test_settings: Settings) -> None:
    # a session Redis does not hold: `show` looks in the SQL record, which does not answer
    env = {
        "PLANLOOP_REDIS_URL": test_settings.redis_url,
        "PLANLOOP_KEY_PREFIX": f"{test_settings.key_prefix}db3",
        "PLANLOOP_DATABASE_URL": "postgresql+psycopg://planloop:s3cret@127.0.0.1:1/planloop",
    }
    result = cli(env, "show", "20260101-000000-abcdef12")

    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "error: cannot reach the database at postgresql+psycopg://planloop:***@127.0.0.1:1/"
    )
    assert "PLANLOOP_DATABASE_URL" in lines[0]
    assert "s3cret" not in result.stderr


# --- exit 2: bad input ----------------------------------------------------------------------
def test_bad_input_exits_2(tmp_path: Path, env_overrides: dict[str, str]) -> None:
    malformed = tmp_path / "bad.yaml"
    malformed.write_text("goal: x\nsteps: [{id: a, tool: bench.echo, params: {value: 1}\n")
    assert planloop(env_overrides, "submit", str(malformed)).returncode == 2

    bad_option = planloop(env_overrides, "status", "--limit", "0")
    assert bad_option.returncode == 2

    bad_settings = cli({"PLANLOOP_TOOL_MODULES": "[not json"}, "status")
    assert bad_settings.returncode == 2
    assert "PLANLOOP_* settings" in bad_settings.stderr
    assert "PLANLOOP_TOOL_MODULES: not a JSON list" in bad_settings.stderr
    assert len(bad_settings.stderr.strip().splitlines()) == 1, bad_settings.stderr


def test_tool_modules_takes_a_comma_list(env_overrides: dict[str, str]) -> None:
    env = {
        **env_overrides,
        "PLANLOOP_TOOL_MODULES": f"{BENCH_TOOLS}, planloop.workers.toolsets.qa",
    }
    assert Settings(tool_modules=f"{BENCH_TOOLS},x.y").tool_modules == [BENCH_TOOLS, "x.y"]  # type: ignore[arg-type]
    # the CLI reads it from the environment and knows the bench tools by it
    result = cli(env, "submit", str(DIAMOND), "--no-worker-check", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["session_id"]


# --- exit 1 and 0: how a watched session ended ------------------------------------------------
def test_a_failed_session_exits_1_a_completed_one_0(
    tmp_path: Path, stack: Stack, env_overrides: dict[str, str], producer: Producer
) -> None:
    plan = tmp_path / "failing.yaml"
    plan.write_text(FAILING)
    failed = planloop(env_overrides, "submit", str(plan), "--wait")
    assert failed.returncode == 1, failed.stderr + failed.stdout
    sid = failed.stdout.splitlines()[0].strip()
    assert producer.session(sid).status == SessionStatus.FAILED
    assert planloop(env_overrides, "watch", sid).returncode == 1

    completed = planloop(env_overrides, "submit", str(DIAMOND), "--wait")
    assert completed.returncode == 0, completed.stderr + completed.stdout


# --- status --json ------------------------------------------------------------------------
def test_status_json(stack: Stack, env_overrides: dict[str, str], producer: Producer) -> None:
    submitted = planloop(env_overrides, "submit", str(DIAMOND), "--wait")
    assert submitted.returncode == 0, submitted.stderr
    sid = submitted.stdout.splitlines()[0].strip()

    one = planloop(env_overrides, "status", sid, "--json")
    assert one.returncode == 0, one.stderr
    doc = json.loads(one.stdout)
    assert doc["session"]["id"] == sid
    assert doc["session"]["status"] == "completed"
    assert doc["counts"] == {"completed": 4}
    assert set(doc["steps"]) == {"start", "slow", "fast", "join"}
    assert any("bench.echo" in w["tools"] for w in doc["workers"])

    listing = json.loads(planloop(env_overrides, "status", "--json").stdout)
    assert sid in [s["id"] for s in listing["sessions"]]

    human = planloop(env_overrides, "status")
    assert f"live workers on queue {env_overrides['PLANLOOP_QUEUE']}: " in human.stdout
    assert "bench" in human.stdout

    missing = planloop(env_overrides, "status", "20260101-000000-00000000", "--json")
    assert missing.returncode == 2


# --- workers advertise their tools ----------------------------------------------------------
def test_submit_refuses_a_tool_no_live_worker_serves_and_can_wait_for_one(
    private_stack: MakeStack, tmp_path: Path
) -> None:
    # toolset A: the default catalogue (ecommerce, supply_chain); the plan needs B (bench)
    ps = private_stack(tool_modules=[], unserved_wait_s=2)  # a plan B needs fails soon
    wait_for(lambda: live_workers(ps.redis, ps.keys, ps.settings.queue), 60, "worker A's heartbeat")
    cli_env = {**ps.settings.to_env(), "PLANLOOP_TOOL_MODULES": BENCH_TOOLS}

    refused = cli(cli_env, "submit", str(DIAMOND))

    assert refused.returncode == 2, refused.stderr
    assert "no live worker serves bench.echo, bench.sleep" in refused.stderr
    assert "ecommerce, supply_chain" in refused.stderr  # the live worker's toolsets
    assert "--wait-for-workers" in refused.stderr
    assert "nothing was submitted" in refused.stderr

    # Python API: the same check, as an option
    bench_producer = Producer.from_settings(
        ps.settings.model_copy(update={"tool_modules": [BENCH_TOOLS]})
    )
    from planloop.core.errors import NoLiveWorkerError

    with pytest.raises(NoLiveWorkerError):
        bench_producer.submit(parse_plan(DIAMOND.read_text()), check_workers=True)

    # Without the check no live worker serves the step: it waits (unserved_wait_s), is never
    # sent to worker A, which lacks the tool, and the session fails naming the tool.
    sid = bench_producer.submit(
        parse_plan("steps: [{id: a, tool: bench.echo, params: {value: 1}}]")
    )
    ended = wait_ended(bench_producer, sid, 60)
    assert ended.status == SessionStatus.FAILED
    assert "no worker serves bench.echo" in ended.error

    # --wait-for-workers: says it waits, then proceeds once a worker with B beats
    err_path = tmp_path / "wait.err"
    with open(err_path, "w") as err:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PLANLOOP_")}
        waiting = subprocess.Popen(
            [*shipped().cli(), "submit", "--wait-for-workers", str(DIAMOND)],
            env=shipped().env({**base, **cli_env}),
            cwd=shipped().home,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        wait_for(
            lambda: (
                "waiting up to 60s for a live worker serving bench.echo" in err_path.read_text()
            ),
            30,
            "submit to say it waits",
        )
        time.sleep(0.5)  # still waiting: no worker with B yet
        assert waiting.poll() is None
        worker_b = shipped().stack(
            {**ps.stack.env, "PLANLOOP_TOOL_MODULES": BENCH_TOOLS}, ps.stack.log_dir
        )
        worker_b.start_worker(4)
        try:
            out, _ = waiting.communicate(timeout=60)
            assert waiting.returncode == 0, err_path.read_text()
            new_sid = out.strip()
            # worker A may take some of its steps: a worker serves only what it has, so the
            # check passed because B is live; it is ended (by B, or failed by A) either way
            assert wait_ended(bench_producer, new_sid, 60).status.ended
        finally:
            worker_b.stop()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait(10)
        bench_producer.state.r.close()


# --- JSON logs --------------------------------------------------------------------------------
def test_json_logs_parse_and_name_the_session(private_stack: MakeStack) -> None:
    ps = private_stack(log_format="json")
    sid = ps.producer.submit(parse_plan(DIAMOND.read_text()))
    assert wait_ended(ps.producer, sid, 60).status == SessionStatus.COMPLETED

    def lines_about_sid() -> list[str]:
        text = "".join(p.read_text() for p in ps.stack.log_dir.glob("supervisor-*.log"))
        return [line for line in text.splitlines() if sid in line]

    about = wait_for(lines_about_sid, 10, "supervisor log lines about the session")
    docs = [json.loads(line) for line in about]  # every one is a JSON object
    assert all(doc["session_id"] == sid for doc in docs)
    assert all({"ts", "level", "logger", "message"} <= doc.keys() for doc in docs)


# --- watch ----------------------------------------------------------------------------------
def test_watch_of_a_fallback_session_reads_completed_with_a_note(
    stack: Stack, env_overrides: dict[str, str], producer: Producer
) -> None:
    result = planloop(
        env_overrides, "submit", str(REPO / "examples" / "supply_chain.yaml"), "--wait"
    )

    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    sid = out.splitlines()[0].strip()
    assert producer.session(sid).status == SessionStatus.COMPLETED
    assert "note ended status=completed note=the fallback of verify_primary took over" in out
    assert "note: the fallback of verify_primary took over" in out
    assert "error: completed" not in out
    # the rule policy's decision is shown whole, wrapped, never cut with an ellipsis
    decision = next(line for line in out.splitlines() if " note decision " in line)
    assert "…" not in decision


def test_live_watch_shows_the_session_elapsed_time(
    tmp_path: Path, stack: Stack, env_overrides: dict[str, str], producer: Producer
) -> None:
    plan = tmp_path / "slow.yaml"
    plan.write_text(SLOW)
    submitted = planloop(env_overrides, "submit", str(plan))
    assert submitted.returncode == 0, submitted.stderr
    sid = submitted.stdout.strip()
    wait_for(
        lambda: producer.state.steps(sid, ["nap"])["nap"].status == StepStatus.RUNNING,
        30,
        "the long step to run",
    )
    time.sleep(1.2)  # the session runs a while before the watch starts (a resumed watch)

    # a terminal as rich sees one: the Live view with its progress bar
    watched = planloop({**env_overrides, "FORCE_COLOR": "1", "COLUMNS": "150"}, "watch", sid)

    assert watched.returncode == 0, watched.stderr
    frames = watched.stdout
    elapsed = re.findall(r"\b0:00:(\d\d)\b", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", frames))
    assert elapsed, frames[-2000:]
    assert max(int(s) for s in elapsed) >= 2  # the session's time, not the watch's from 0
    assert "0:00:00" not in frames
