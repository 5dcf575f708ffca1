"""The ``planloop`` command line as a user runs it: a subprocess against the real stack."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.models import SessionStatus, StepStatus
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, free_port
from tests.conftest import wait_for
from tests.integration.conftest import RunPlan, wait_ended
from tests.shipped import shipped

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DIAMOND = REPO / "examples" / "diamond.yaml"
DIAMOND_STEPS = ("start", "slow", "fast", "join")

CYCLE = """
goal: a cycle
steps:
  - {id: a, tool: bench.echo, params: {value: 1}, dependencies: [c]}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a]}
  - {id: c, tool: bench.echo, params: {value: 3}, dependencies: [b]}
"""

UNKNOWN_TOOL = """
goal: unknown tool
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.teleport, params: {}, dependencies: [a]}
"""

LONG_SLEEP = """
goal: sleep for a long time
steps:
  - {id: nap, tool: bench.sleep, params: {seconds: 25}, timeout_s: 60}
  - {id: after, tool: bench.echo, params: {value: 1}, dependencies: [nap]}
"""


def planloop(
    env_overrides: dict[str, str], *args: str, timeout_s: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``planloop ARGS`` as a user would, with the test run's settings."""
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**os.environ, **env_overrides}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def session_count(client: redis.Redis, settings: Settings) -> int:
    return int(client.zcard(Keys(settings.key_prefix).sessions))


@pytest.fixture(scope="module")
def diamond_sid(stack: Stack, env_overrides: dict[str, str]) -> str:
    """A diamond session submitted and watched to its end through the CLI."""
    result = planloop(env_overrides, "submit", str(DIAMOND), "--wait")
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout.splitlines()[0].strip()


# --- invalid input: exit 2, a message naming the problem, nothing enqueued ----------------
def test_cycle_exits_2_names_the_cycle_and_enqueues_nothing(
    tmp_path: Path,
    env_overrides: dict[str, str],
    redis_client: redis.Redis,
    test_settings: Settings,
) -> None:
    plan = tmp_path / "cycle.yaml"
    plan.write_text(CYCLE)
    before = session_count(redis_client, test_settings)
    result = planloop(env_overrides, "submit", str(plan))
    assert result.returncode == 2
    assert "cycle" in result.stderr
    assert "a -> b -> c -> a" in result.stderr
    assert "nothing was submitted" in result.stderr
    assert result.stdout == ""
    assert session_count(redis_client, test_settings) == before


def test_unknown_tool_exits_2_and_names_the_tool(
    tmp_path: Path,
    env_overrides: dict[str, str],
    redis_client: redis.Redis,
    test_settings: Settings,
) -> None:
    plan = tmp_path / "unknown.yaml"
    plan.write_text(UNKNOWN_TOOL)
    before = session_count(redis_client, test_settings)
    result = planloop(env_overrides, "submit", str(plan))
    assert result.returncode == 2
    assert "bench.teleport" in result.stderr
    assert session_count(redis_client, test_settings) == before


def test_missing_file_exits_2(tmp_path: Path, env_overrides: dict[str, str]) -> None:
    missing = tmp_path / "nope.yaml"
    result = planloop(env_overrides, "submit", str(missing))
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr
    assert "not found" in result.stderr


# --- a session through the CLI ------------------------------------------------------------
def test_submit_wait_prints_progress_and_the_report(
    stack: Stack, env_overrides: dict[str, str], producer: Producer
) -> None:
    result = planloop(env_overrides, "submit", str(DIAMOND), "--wait")
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    sid = out.splitlines()[0].strip()
    assert producer.session(sid).status == SessionStatus.COMPLETED
    assert "\x1b[" not in out  # not a terminal: plain lines, no ANSI
    assert "TASK_COMPLETED" in out
    assert "note ended status=completed" in out
    assert f"report of {sid}: completed" in out
    for step_id in DIAMOND_STEPS:
        assert f"step {step_id} " in out
    assert "4 completed" in out


def test_status_of_one_session(diamond_sid: str, env_overrides: dict[str, str]) -> None:
    result = planloop(env_overrides, "status", diamond_sid)
    assert result.returncode == 0, result.stderr
    assert f"session      {diamond_sid}" in result.stdout
    assert "status       completed" in result.stdout
    assert "steps        4: 4 completed" in result.stdout


def test_status_lists_newest_sessions(diamond_sid: str, env_overrides: dict[str, str]) -> None:
    result = planloop(env_overrides, "status", "--limit", "50")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if diamond_sid in line)
    assert "completed" in row


def test_status_of_unknown_session_exits_2(stack: Stack, env_overrides: dict[str, str]) -> None:
    result = planloop(env_overrides, "status", "no-such-session")
    assert result.returncode == 2
    assert "no-such-session" in result.stderr


def test_watch_of_an_ended_session_replays_its_events_then_the_report(
    diamond_sid: str, env_overrides: dict[str, str]
) -> None:
    result = planloop(env_overrides, "watch", diamond_sid)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"watching {diamond_sid} (completed)")
    assert out.count("TASK_COMPLETED") == len(DIAMOND_STEPS)
    assert out.index("TASK_COMPLETED") < out.index(f"report of {diamond_sid}: completed")


def test_show_prints_timeline_report_and_mermaid(
    diamond_sid: str, env_overrides: dict[str, str]
) -> None:
    result = planloop(env_overrides, "show", diamond_sid)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "TASK_COMPLETED" in out
    assert f"report of {diamond_sid}: completed" in out
    assert "```mermaid\nflowchart TD" in out
    for step_id in DIAMOND_STEPS:
        assert f"{step_id}<br/>" in out
    assert out.count(":::completed") == len(DIAMOND_STEPS)


def test_show_json_is_one_object(diamond_sid: str, env_overrides: dict[str, str]) -> None:
    result = planloop(env_overrides, "show", diamond_sid, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {
        "session",
        "report",
        "events",
        "mermaid",
        "plan_versions",
        "decisions",
        "llm_calls",
        "llm",
        "llm_budget",
        "forks",
        "late_effects",
    }
    assert doc["llm_budget"] == {
        "tokens": 0,
        "max_tokens": None,
        "cost_usd": 0.0,
        "max_cost_usd": None,
    }
    assert [v["version"] for v in doc["plan_versions"]] == [1]
    assert doc["decisions"] == []
    assert doc["llm"] == {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    assert doc["session"]["status"] == "completed"
    assert [s["id"] for s in doc["report"]["steps"]] == list(DIAMOND_STEPS)
    assert doc["report"]["steps"][-1]["output"] == {"value": {"n": 21, "slept": 0.2}}
    completed = {e["step_id"] for e in doc["events"] if e["type"] == "TASK_COMPLETED"}
    assert completed == set(DIAMOND_STEPS)
    assert doc["mermaid"].startswith("flowchart TD")


def test_cancel_ends_a_running_session_cancelled(
    tmp_path: Path, stack: Stack, env_overrides: dict[str, str], producer: Producer
) -> None:
    plan = tmp_path / "long.yaml"
    plan.write_text(LONG_SLEEP)
    submitted = planloop(env_overrides, "submit", str(plan), "--json")
    assert submitted.returncode == 0, submitted.stderr
    sid = json.loads(submitted.stdout)["session_id"]
    wait_for(
        lambda: producer.state.steps(sid, ["nap"])["nap"].status == StepStatus.RUNNING,
        30,
        "the long step to run",
    )
    result = planloop(env_overrides, "cancel", sid, "--reason", "test says stop")
    assert result.returncode == 0, result.stderr
    assert f"cancel requested for {sid}" in result.stdout
    record = wait_ended(producer, sid, timeout_s=20)
    assert record.status == SessionStatus.CANCELLED
    steps = producer.state.steps(sid, ["nap", "after"])
    assert steps["after"].status != StepStatus.COMPLETED


# --- flower -------------------------------------------------------------------------------
@pytest.fixture
def flower_url(env_overrides: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """Flower started by ``planloop flower`` on a free port (credentials tester:s3cret-pw)."""
    port = free_port()
    env = {**os.environ, **env_overrides, "PLANLOOP_FLOWER_BASIC_AUTH": "tester:s3cret-pw"}
    log = tmp_path / "flower.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*shipped().cli(), "flower", "--port", str(port)],
            env=shipped().env(env),
            cwd=shipped().home,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(10)
        assert "s3cret-pw" not in log.read_text()


def _get_json(url: str, auth: str) -> object:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, ValueError):
        return None


def _get(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError):
        return 0  # not listening yet


def test_flower_asks_for_basic_auth(stack: Stack, flower_url: str) -> None:
    status = wait_for(lambda: _get(flower_url), 60, "Flower to listen")
    assert status == 401
    assert _get(flower_url, "tester:wrong") == 401
    assert _get(flower_url, "tester:s3cret-pw") == 200


def _flower_saw(flower_url: str, sid: str, steps: str) -> dict[str, dict[str, object]] | None:
    """The tasks of session ``sid`` Flower lists, once each of ``steps`` succeeded there."""
    tasks = _get_json(f"{flower_url}api/tasks", "tester:s3cret-pw")
    if not isinstance(tasks, dict):
        return None
    ours = {k: v for k, v in tasks.items() if k.startswith(f"{sid}:")}
    done = all(ours.get(f"{sid}:{s}:1", {}).get("state") == "SUCCESS" for s in steps)
    return ours if done else None


def test_flower_shows_steps_by_name_with_their_state(
    stack: Stack, flower_url: str, run_plan: RunPlan
) -> None:
    """Dispatch's task-sent event and the worker's batched task events both reach Flower."""
    wait_for(lambda: _get(flower_url, "tester:s3cret-pw") == 200, 60, "Flower to listen")
    # Flower serves HTTP before its event receiver subscribes, and events sent before that
    # are gone: a warm-up session shows when they flow (a session here takes milliseconds).
    warm_up = {
        "goal": "warm-up",
        "steps": [{"id": "w", "tool": "bench.sleep", "params": {"seconds": 0}}],
    }

    def events_flow() -> bool:
        sid, _ = run_plan(warm_up)
        seen_by = time.monotonic() + 3
        while time.monotonic() < seen_by:
            if _flower_saw(flower_url, sid, "w") is not None:
                return True
            time.sleep(0.1)
        return False

    wait_for(events_flow, 60, "Flower to receive task events")
    plan = {
        "goal": "seen in Flower",
        "steps": [
            {"id": "a", "tool": "bench.sleep", "params": {"seconds": 0}},
            {"id": "b", "tool": "bench.sleep", "params": {"seconds": 0}, "dependencies": ["a"]},
        ],
    }
    sid, record = run_plan(plan)
    assert record.status == SessionStatus.COMPLETED

    tasks = wait_for(lambda: _flower_saw(flower_url, sid, "ab"), 30, "Flower to see both steps")
    task = tasks[f"{sid}:b:1"]
    assert task["name"] == "planloop.step:bench.sleep"  # the step task, shadow-named by tool
    assert '"step": "b"' in str(task["args"])


def test_submit_can_keep_the_writes_of_a_failed_session(
    stack: Stack, env_overrides: dict[str, str], producer: Producer
) -> None:
    result = planloop(env_overrides, "submit", str(DIAMOND), "--no-compensate-on-failure")
    assert result.returncode == 0, result.stderr
    sid = result.stdout.strip()
    assert producer.session(sid).options.compensate_on_failure is False
    assert wait_ended(producer, sid, 60).status == SessionStatus.COMPLETED
