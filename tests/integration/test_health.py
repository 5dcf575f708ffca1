"""``planloop health ROLE``: the checks compose runs, against real processes."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.producer.health import flower_health, supervisor_health, worker_health
from planloop.producer.stack import Stack, free_port
from tests.conftest import wait_for
from tests.shipped import shipped

pytestmark = pytest.mark.integration


def test_worker_and_supervisor_of_this_host_are_healthy(
    stack: Stack, test_settings: Settings, env_overrides: dict[str, str]
) -> None:
    wait_for(lambda: worker_health(test_settings).ok, 30, "a worker ping")
    wait_for(lambda: supervisor_health(test_settings).ok, 30, "a supervisor")
    # another host's processes do not count
    assert not worker_health(test_settings, host="elsewhere").ok
    assert not supervisor_health(test_settings, host="elsewhere").ok
    env = {**os.environ, **env_overrides}
    for role in ("worker", "supervisor"):
        done = subprocess.run(
            [*shipped().cli(), "health", role],
            env=shipped().env(env),
            cwd=shipped().home,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert socket.gethostname() in done.stdout


def test_no_supervisor_is_unhealthy(test_settings: Settings, redis_client: object) -> None:
    lonely = test_settings.model_copy(update={"key_prefix": f"{test_settings.key_prefix}none"})
    result = supervisor_health(lonely)
    assert not result.ok
    assert "no supervisor on" in result.detail


def test_flower_health_asks_flowers_healthcheck(
    test_settings: Settings, env_overrides: dict[str, str], tmp_path: Path, redis_client: object
) -> None:
    port = free_port()
    env = {**os.environ, **env_overrides, "PLANLOOP_FLOWER_BASIC_AUTH": "ops:s3cret"}
    settings = test_settings.model_copy(
        update={"flower_basic_auth": SecretStr("ops:s3cret"), "flower_port": port}
    )
    with open(tmp_path / "flower.log", "wb") as log:
        flower = subprocess.Popen(
            [*shipped().cli(), "flower", "--port", str(port)],
            env=shipped().env(env),
            cwd=shipped().home,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: flower_health(settings).ok, 60, "Flower to answer /healthcheck")
        assert "answered 200" in flower_health(settings).detail
    finally:
        flower.terminate()
        flower.wait(20)
    stopped = flower_health(settings)
    assert not stopped.ok
    assert "does not answer" in stopped.detail
