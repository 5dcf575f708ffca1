"""The wheel, installed into an empty virtualenv: ``planloop up --demo`` runs to the end, and
the distribution occupies one top-level name, ``planloop``, next to an application that has
its own ``config`` and ``core`` packages."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from tests.integration.conftest import _delete_prefix
from tests.integration.packaging import installed_top_level
from tests.shipped import shipped

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed() -> Path:
    """The bin dir of the fresh venv holding the wheel built from this checkout."""
    return shipped().bin


@pytest.fixture
def user_env(redis_client: redis.Redis, run_id: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user's environment: no checkout on the path, the test Redis under a prefix of its own."""
    prefix = f"{run_id}wheel"
    url = redis_client.connection_pool.connection_kwargs
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PLANLOOP_", "PYTHON", "VIRTUAL"))
    }
    env.update(
        PLANLOOP_REDIS_URL=f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}",
        PLANLOOP_KEY_PREFIX=prefix,
        PLANLOOP_QUEUE=prefix,
        HOME=str(tmp_path),
    )
    yield env
    _delete_prefix(redis_client, prefix)


@pytest.mark.timeout(900)
def test_up_demo_runs_from_a_plain_pip_install(
    installed: Path, user_env: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(installed / "planloop"), "up", "--demo"],
        cwd=tmp_path,  # no examples/ here: the demo plan comes from the package
        env=user_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "completed; stopping the stack" in done.stdout
    # the record was created by the shipped migrations
    current = subprocess.run(
        [str(installed / "planloop"), "db", "current"],
        cwd=tmp_path,
        env=user_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert current.returncode == 0, current.stdout + current.stderr


APP_CONFIG = 'APP_NAME = "acme"\n'
APP_CORE = "def shout(text: str) -> str:\n    return text.upper() + '!'\n"
APP_TOOLS = '''"""The application's own tool: it uses the application's own `config` and `core`."""
from pydantic import BaseModel

import config
import core
import planloop


class GreetParams(BaseModel):
    name: str


class Greeting(BaseModel):
    text: str


@planloop.tool("acme.greet", description="Greet someone.", params=GreetParams, output=Greeting)
def greet(params: GreetParams, ctx: planloop.ToolContext) -> Greeting:
    return Greeting(text=core.shout(f"{config.APP_NAME} greets {params.name}"))
'''
APP_SCRIPT = """import config
import core
import planloop

assert config.APP_NAME == "acme" and core.shout("a") == "A!"  # the app's own packages
plan = planloop.Plan(goal="greet", steps=[
    planloop.Step(id="hello", tool="acme.greet", params={"name": "ada"}),
    planloop.Step(id="stock", tool="ecommerce.inventory", params={"product_id": "SKU1"},
                  dependencies=["hello"]),
])
with planloop.Client() as client:
    sid = client.submit(plan)
    report = client.wait(sid, timeout_s=120)
print("status", report.status.value)
print("hello", report.outputs["hello"]["text"])
"""


@pytest.mark.timeout(900)
def test_the_wheel_lives_under_planloop_next_to_an_app_with_config_and_core(
    installed: Path, user_env: dict[str, str], tmp_path: Path
) -> None:
    assert installed_top_level(installed) == {"planloop"}
    app = tmp_path / "app"
    for name, text in {
        "config/__init__.py": APP_CONFIG,
        "core/__init__.py": APP_CORE,
        "acme_tools.py": APP_TOOLS,
        "run.py": APP_SCRIPT,
    }.items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_text(text)
    # as a user serves their own tools: the app's directory on PYTHONPATH, which also puts
    # its `config` and `core` first on the path of every Planloop process
    env = {**user_env, "PLANLOOP_TOOL_MODULES": '["acme_tools"]', "PYTHONPATH": str(app)}
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        # the stack's worker serves the app's tool
        up = subprocess.Popen(
            [str(installed / "planloop"), "up"],
            cwd=app,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "stack ready" in log.read_text(), 120, "the stack to be ready")
        done = subprocess.run(
            [str(installed / "python"), "run.py"],
            cwd=app,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        # SIGTERM takes up's Ctrl-C path; SIGINT itself is ignored by a process started
        # from a background job of a non-interactive shell (`.ci/run &`).
        up.send_signal(signal.SIGTERM)
        up.wait(60)
    assert done.returncode == 0, done.stdout + done.stderr + log.read_text()[-3000:]
    assert "status completed" in done.stdout
    assert "hello ACME GREETS ADA!" in done.stdout
