"""No well-known login, with the shipped `planloop console` and `planloop flower` as
processes: started without credentials on a loopback address they generate a password,
print it once and keep it 0600; on any other address they refuse to start."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from planloop.producer.stack import Stack, free_port
from tests.conftest import wait_for
from tests.console_users import FLOWER_LOGIN, auth_header, login
from tests.shipped import shipped

pytestmark = pytest.mark.integration

PASSWORD = re.compile(r"with password (\S+) \(shown once; kept in (\S+)\)")


def bare_env(env_overrides: dict[str, str], secrets: Path) -> dict[str, str]:
    """The test stack's variables with no console users and no Flower login."""
    env = {**os.environ, **env_overrides, "PLANLOOP_SECRETS_DIR": str(secrets)}
    env["PLANLOOP_CONSOLE_USERS"] = ""
    env["PLANLOOP_FLOWER_BASIC_AUTH"] = ""
    return shipped().env(env)


def status_of(url: str, credentials: str | None) -> int:
    request = urllib.request.Request(url, headers=auth_header(credentials) if credentials else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@contextmanager
def serving(argv: list[str], env: dict[str, str], log: Path, url: str) -> Iterator[str]:
    """Run ``planloop ARGV`` until ``url`` answers; its output so far."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [*shipped().cli(), *argv], env=env, cwd=shipped().home, stdout=sink, stderr=sink
        )

    def answers() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            status_of(url, None)
            return True
        except OSError:
            return False

    try:
        wait_for(answers, 60, f"{argv[0]} to answer")
        yield log.read_text()
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_console_without_users_generates_a_password_once_and_keeps_it_0600(
    stack: Stack, env_overrides: dict[str, str], tmp_path: Path
) -> None:
    env, port = bare_env(env_overrides, tmp_path / "secrets"), free_port()
    url = f"http://127.0.0.1:{port}/api/me"
    argv = ["console", "--port", str(port)]
    with serving(argv, env, tmp_path / "first.log", url) as said:
        found = PASSWORD.search(said)
        assert found, said
        password, kept = found.group(1), Path(found.group(2))
        assert len(password) >= 32
        assert kept.read_text().strip() == password
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert status_of(url, f"admin:{password}") == 200
        for pair in ("admin:planloop", "admin:admin", FLOWER_LOGIN, login("otto")):
            assert status_of(url, pair) == 401, pair
    with serving(argv, env, tmp_path / "again.log", url) as said:
        assert password not in said  # shown once only
        assert str(kept) in said
        assert status_of(url, f"admin:{password}") == 200  # the same password after a restart


@pytest.mark.parametrize("command", ["console", "flower"])
def test_without_credentials_a_non_loopback_address_is_refused(
    command: str, env_overrides: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [*shipped().cli(), command, "--address", "0.0.0.0", "--port", str(free_port())],
        env=bare_env(env_overrides, tmp_path / "secrets"),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "without credentials" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "secrets").exists()  # nothing generated for it


def test_flower_runs_with_its_own_login_only(
    stack: Stack, env_overrides: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    env = shipped().env({**os.environ, **env_overrides})
    url = f"http://127.0.0.1:{port}/healthcheck"  # Flower leaves it open: for readiness
    page = f"http://127.0.0.1:{port}/"
    with serving(["flower", "--port", str(port)], env, tmp_path / "flower.log", url) as said:
        assert FLOWER_LOGIN.partition(":")[2] not in said  # its password is never printed
        assert status_of(page, FLOWER_LOGIN) == 200
        for pair in ("admin:planloop", login("ada"), None):
            assert status_of(page, pair) == 401, pair


def test_flower_without_a_login_generates_one_its_health_check_finds(
    stack: Stack, env_overrides: dict[str, str], tmp_path: Path
) -> None:
    port, secrets = free_port(), tmp_path / "secrets"
    env = bare_env(env_overrides, secrets)
    url, page = f"http://127.0.0.1:{port}/healthcheck", f"http://127.0.0.1:{port}/"
    with serving(["flower", "--port", str(port)], env, tmp_path / "flower.log", url) as said:
        found = PASSWORD.search(said)
        assert found, said
        kept = Path(found.group(2))
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert status_of(page, f"flower:{found.group(1)}") == 200
        assert status_of(page, "admin:planloop") == 401
        health = subprocess.run(
            [*shipped().cli(), "health", "flower", "--port", str(port)],
            env=env,
            cwd=shipped().home,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert health.returncode == 0, health.stdout + health.stderr
