"""The wheel, installed into an empty virtualenv: ``planloop up --demo`` runs to the end."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.integration.conftest import _delete_prefix
from tests.integration.packaging import build_wheel, fresh_venv

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin dir of a fresh venv holding the wheel built from this checkout."""
    workdir = tmp_path_factory.mktemp("wheel")
    return fresh_venv(workdir, build_wheel(workdir))


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
