"""Which Redis errors are waited out, one log line per outage, and `up`'s restart back-off."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from planloop.core.redis_faults import Outage, is_missing_group, is_redis_fault, redact_url
from planloop.producer.stack import RESTART_FIRST_S, RESTART_MAX_S, Child, Stack


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (redis.ConnectionError("Error 111 connecting"), True),
        (redis.TimeoutError("Timeout reading from socket"), True),
        (redis.BusyLoadingError("Redis is loading the dataset in memory"), True),
        (redis.ResponseError("NOGROUP No such key 'pl:inbox' or consumer group 'sup'"), True),
        (redis.ResponseError("UNBLOCKED the stream key no longer exists"), True),
        (redis.AuthenticationError("invalid username-password pair"), False),
        (redis.ResponseError("ERR Error running script: attempt to compare nil"), False),
        (redis.ResponseError("WRONGTYPE Operation against a key"), False),
    ],
)
def test_which_errors_are_faults(exc: Exception, fault: bool) -> None:
    assert is_redis_fault(exc) is fault


def test_missing_group_is_told_apart() -> None:
    assert is_missing_group(redis.ResponseError("NOGROUP No such key"))
    assert not is_missing_group(redis.ConnectionError("Error 111"))


def test_outage_logs_once_per_change_and_backs_off(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage("redis://:s3cret@db:6379/0", logging.getLogger("t"), first_s=0.1, max_s=0.5)
    caplog.set_level(logging.INFO, "t")
    waits = [outage.failed(redis.ConnectionError("refused")) for _ in range(5)]
    outage.over()
    outage.over()
    assert waits == [0.1, 0.2, 0.4, 0.5, 0.5]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("redis unreachable at redis://:***@db:6379/0")
    assert lines[1].startswith("redis back after")
    assert "s3cret" not in " ".join(lines)
    assert outage.failed(redis.ConnectionError("again")) == 0.1  # a new outage starts over


def test_redact_url() -> None:
    assert redact_url("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"


class FakeProcess:
    """Enough of a Popen for the restart logic."""

    pids = iter(range(1000, 2000))

    def __init__(self) -> None:
        self.pid = next(self.pids)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


def test_dead_children_restart_with_doubling_back_off(tmp_path: Path) -> None:
    stack = Stack(env={}, log_dir=tmp_path)
    started: list[FakeProcess] = []

    def popen(_log_name: str, _args: list[str], *_where: Any) -> Any:  # cwd, env
        started.append(FakeProcess())
        return started[-1]

    stack._popen = popen  # type: ignore[method-assign]
    first = cast(subprocess.Popen[bytes], FakeProcess())
    stack.processes.append(first)
    stack.children.append(Child("worker", ["worker"], first, started_at=0.0))

    def die_at(now: float) -> list[str]:
        cast(FakeProcess, stack.processes[0]).returncode = 1
        assert stack.restart_dead(now) == []  # seen dead: the back-off starts
        return stack.restart_dead(now + RESTART_MAX_S)

    assert stack.restart_dead(0.5) == []  # alive: nothing to do
    lines = die_at(1.0)
    assert len(lines) == 1, lines
    assert "exited with code 1" in lines[0], lines
    assert stack.processes[0] is started[-1]
    assert stack.children[0].delay_s == 2 * RESTART_FIRST_S
    for _ in range(10):
        die_at(stack.children[0].started_at + 1)
    assert stack.children[0].delay_s == RESTART_MAX_S
    # A child that ran for a minute starts over at the first delay.
    now = stack.children[0].started_at + 61
    cast(FakeProcess, stack.processes[0]).returncode = -9
    assert stack.restart_dead(now) == []
    assert stack.restart_dead(now + RESTART_FIRST_S) != []
    assert len(started) == 12
