"""A user's own tools: a worker imports the module from its folder; producers need no tool code.

The tool module is written to a temporary directory outside the repository and the worker is
started there (its working directory); the producer runs ``planloop`` from another directory,
where that module cannot be imported, and validates against the catalogue the worker publishes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

import planloop
from planloop.core.errors import PlanValidationError
from planloop.core.heartbeat import read_heartbeats
from planloop.core.live_tools import LOCAL_NOTE
from planloop.workers.toolsets import BENCH_TOOLS
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack
from tests.llm_server import ScriptedLLMServer
from tests.shipped import shipped

pytestmark = pytest.mark.integration

ACME_MODULE = "acme_greetings"
ACME_SOURCE = '''"""Acme's tools: a greeting."""
from pydantic import BaseModel, Field

import planloop


class GreetParams(BaseModel):
    name: str = Field(description="Who to greet.")
    times: int = Field(1, ge=1, description="How many times.")


@planloop.tool("acme.greet", description="Greets someone by name.", params=GreetParams)
def greet(params: GreetParams, ctx: planloop.ToolContext) -> dict[str, str]:
    return {"text": " ".join([f"hello {params.name}"] * params.times)}
'''

GREET_PLAN = """
goal: greet Ada
steps:
  - {id: hello, tool: acme.greet, params: {name: Ada, times: %s}}
"""


def cli(
    *args: str, env: Mapping[str, str], cwd: Path, timeout_s: float = 90
) -> subprocess.CompletedProcess[str]:
    """``planloop ARGS`` as a user runs it, from ``cwd`` (the one place the command is built)."""
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def user_env(built: PrivateStack, **extra: str) -> dict[str, str]:
    """The environment of a user's shell pointed at the private stack's Redis and prefix."""
    return {**os.environ, **built.settings.to_env(), **extra}


def module_dir(root: Path, name: str, source: str) -> Path:
    folder = root / "tools-home"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    return folder


def elsewhere(root: Path) -> Path:
    """A directory where nothing of the user's can be imported from."""
    folder = root / "producer-home"
    folder.mkdir(exist_ok=True)
    return folder


def start_acme_worker(built: PrivateStack, root: Path) -> None:
    """A worker started in acme's folder, serving acme.greet besides the bench tools; back
    once its heartbeat lists acme.greet."""
    folder = module_dir(root, ACME_MODULE, ACME_SOURCE)
    modules = json.dumps([BENCH_TOOLS, ACME_MODULE])
    built.start_worker(4, cwd=folder, env={"PLANLOOP_TOOL_MODULES": modules})
    wait_for(
        lambda: any("acme.greet" in hb.tools for hb in read_heartbeats(built.redis, built.keys)),
        60,
        "the acme worker's heartbeat",
    )


@pytest.fixture
def acme_stack(private_stack: MakeStack, tmp_path: Path) -> PrivateStack:
    """A supervisor without acme's code, and the acme worker (:func:`start_acme_worker`)."""
    built = private_stack(workers=0, supervisors=1)
    start_acme_worker(built, tmp_path)
    return built


def test_a_producer_without_the_tool_code_submits_a_plan_using_it(
    acme_stack: PrivateStack, tmp_path: Path
) -> None:
    env, home = user_env(acme_stack), elsewhere(tmp_path)
    plan = home / "greet.yaml"
    plan.write_text(GREET_PLAN % 2)
    probe = cli("--version", env=env, cwd=home)  # the CLI itself runs from here
    assert probe.returncode == 0, probe.stderr
    cannot = subprocess.run(
        [str(shipped().python), "-c", f"import {ACME_MODULE}"],
        env=shipped().env(env),
        cwd=home,
        check=False,
    )
    assert cannot.returncode != 0, "the producer's side must not be able to import acme's code"

    done = cli("submit", str(plan), "--wait", env=env, cwd=home)

    assert done.returncode == 0, done.stderr + done.stdout
    assert "no live worker" not in done.stderr
    sid = done.stdout.splitlines()[0].strip()
    record = acme_stack.producer.session(sid)
    assert record.status == "completed"
    assert record.report is not None
    outputs = {s["id"]: s.get("output") for s in record.report["steps"]}
    assert outputs["hello"] == {"text": "hello Ada hello Ada"}


def test_a_wrong_param_is_refused_naming_it_from_the_published_schema(
    acme_stack: PrivateStack, tmp_path: Path
) -> None:
    env, home = user_env(acme_stack), elsewhere(tmp_path)
    plan = home / "greet.yaml"
    plan.write_text(GREET_PLAN % '"many"')
    sessions_before = acme_stack.redis.zcard(acme_stack.keys.sessions)

    refused = cli("submit", str(plan), env=env, cwd=home)

    assert refused.returncode == 2, refused.stderr + refused.stdout
    assert "step 'hello': param 'times': should be of type 'integer'" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert acme_stack.redis.zcard(acme_stack.keys.sessions) == sessions_before


def test_planloop_tools_lists_the_tool_with_its_worker_and_queue(
    acme_stack: PrivateStack, tmp_path: Path
) -> None:
    env, home = user_env(acme_stack), elsewhere(tmp_path)
    worker = next(
        hb for hb in read_heartbeats(acme_stack.redis, acme_stack.keys) if "acme.greet" in hb.tools
    )

    listed = cli("tools", env=env, cwd=home)
    as_json = cli("tools", "--json", env=env, cwd=home)

    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "acme.greet" in line)
    # the pool queue of its tool set (core/routing.py), as its heartbeat says
    assert row.split()[:3] == [worker.worker, ",".join(worker.consumed()), "acme.greet"]
    assert "Greets someone by name." in row
    doc = json.loads(as_json.stdout)
    assert doc["source"] == "live"
    mine = next(w for w in doc["workers"] if w["worker"] == worker.worker)
    assert "acme.greet" in mine["tools"]
    assert mine["queues"] == worker.consumed()
    assert worker.consumed()[0].startswith(f"{acme_stack.settings.queue}.acme+")
    greet = next(t for t in doc["tools"] if t["name"] == "acme.greet")
    assert set(greet["params_schema"]["properties"]) == {"name", "times"}


def test_an_unimportable_tool_module_is_exit_2_in_one_line_naming_it(
    private_stack: MakeStack, tmp_path: Path
) -> None:
    built = private_stack(workers=0, supervisors=0)
    home = elsewhere(tmp_path)
    plan = home / "echo.yaml"
    plan.write_text("steps:\n  - {id: a, tool: bench.echo, params: {value: 1}}\n")
    env = user_env(built, PLANLOOP_TOOL_MODULES="acme_nowhere")
    for args in (["tools"], ["submit", str(plan)], ["status"], ["worker"], ["supervisor"]):
        done = cli(*args, env=env, cwd=home)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert len(lines) == 1, (args, done.stderr)
        assert "'acme_nowhere'" in lines[0]
        assert "PYTHONPATH" in lines[0]


def test_a_missing_dependency_inside_the_module_is_named(
    private_stack: MakeStack, tmp_path: Path
) -> None:
    built = private_stack(workers=0, supervisors=0)
    folder = module_dir(tmp_path, "acme_needy", "import acme_not_installed_dep\n")
    done = cli("worker", env=user_env(built, PLANLOOP_TOOL_MODULES="acme_needy"), cwd=folder)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert "'acme_needy'" in lines[0]
    assert "'acme_not_installed_dep'" in lines[0]
    assert "was found" in lines[0]


def test_with_no_live_worker_the_local_catalogue_is_used_and_said(
    private_stack: MakeStack, tmp_path: Path
) -> None:
    built = private_stack(workers=0, supervisors=0)
    env, home = user_env(built), elsewhere(tmp_path)
    plan = home / "echo.yaml"
    plan.write_text("steps:\n  - {id: a, tool: bench.echo, params: {value: 1}}\n")

    listed = cli("tools", env=env, cwd=home)
    submitted = cli("submit", str(plan), "--no-worker-check", env=env, cwd=home)

    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("no live worker: using the local tool catalogue")
    assert "bench.echo" in listed.stdout
    assert "ecommerce.inventory" in listed.stdout
    assert submitted.returncode == 0, submitted.stderr
    notes = [line for line in submitted.stderr.splitlines() if "no live worker" in line]
    assert notes == [
        "note: no live worker: using the local tool catalogue (bundled toolsets and "
        "PLANLOOP_TOOL_MODULES) instead of the one workers publish"
    ]


def test_the_planner_is_shown_the_tools_live_workers_serve(
    private_stack: MakeStack, llm_server: ScriptedLLMServer, tmp_path: Path
) -> None:
    llm_server.reset()
    built = private_stack(
        workers=0,
        supervisors=1,
        llm_base_url=llm_server.base_url,
        llm_api_key="test",
        llm_max_retries=0,
    )
    start_acme_worker(built, tmp_path)
    step = {"id": "hello", "tool": "acme.greet", "params": {"name": "Ada"}, "dependencies": []}
    llm_server.script("planner", {"steps": [step]})
    env, home = user_env(built), elsewhere(tmp_path)

    try:
        done = cli(
            "submit",
            "--goal",
            "greet Ada",
            "--tools",
            "acme",
            "--mode",
            "plan",
            "--wait",
            env=env,
            cwd=home,
        )
        planner_prompts = [r.prompt_text for r in llm_server.requests_for("planner")]
    finally:
        llm_server.reset()

    assert done.returncode == 0, done.stderr + done.stdout
    assert len(planner_prompts) == 1
    assert "acme.greet" in planner_prompts[0]
    assert "Greets someone by name." in planner_prompts[0]
    assert "Who to greet." in planner_prompts[0]  # the published params schema
    record = built.producer.session(done.stdout.splitlines()[0].strip())
    assert record.status == "completed", record.error


def test_the_python_client_validates_against_the_live_catalogue(acme_stack: PrivateStack) -> None:
    assert ACME_MODULE not in sys.modules  # this process has none of acme's code
    plan = {"goal": "greet", "steps": [{"id": "hello", "tool": "acme.greet", "params": {}}]}
    with planloop.Client(acme_stack.settings) as client:
        with pytest.raises(PlanValidationError, match="step 'hello': param 'name': Field required"):
            client.submit(plan)
        plan["steps"][0]["params"] = {"name": "Bo"}
        report = client.wait(client.submit(plan), timeout_s=60)
    assert report.status == "completed"
    assert report.outputs["hello"] == {"text": "hello Bo"}


def test_the_python_client_logs_the_local_fallback(
    private_stack: MakeStack, caplog: pytest.LogCaptureFixture
) -> None:
    built = private_stack(workers=0, supervisors=0)
    plan = {"steps": [{"id": "a", "tool": "bench.echo", "params": {"value": 1}}]}
    with (
        caplog.at_level("WARNING", logger="planloop.core.live_tools"),
        planloop.Client(built.settings) as client,
    ):
        client.submit(plan)
        client.submit(plan)
    notes = [r.getMessage() for r in caplog.records if "no live worker" in r.getMessage()]
    assert notes == [LOCAL_NOTE]  # once, not once per submit
