"""`planloop console` from the shipped wheel as a process of its own, on a free port."""

from __future__ import annotations

import contextlib
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from planloop.producer.stack import free_port
from tests.conftest import wait_for
from tests.console_users import PASSWORDS
from tests.shipped import shipped


@dataclass
class Console:
    url: str
    port: int
    user: str
    password: str
    proc: subprocess.Popen[bytes]
    log: Path

    def rss_peak_kib(self) -> int:
        """The process's peak resident memory so far (VmHWM), KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM in /proc status")


@contextlib.contextmanager
def console_process(
    env_overrides: dict[str, str],
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
    user: str = "otto",  # an operator (tests/console_users.py)
) -> Iterator[Console]:
    port = free_port()
    log = log_dir / f"console-{port}.log"
    env = shipped().env({**os.environ, **env_overrides, **(extra_env or {})})
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [*shipped().cli(), "console", "--port", str(port)],
            env=env,
            cwd=shipped().home,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            assert proc.poll() is None, log.read_text()
            return False

    try:
        wait_for(healthy, 30, "the console to answer")
        yield Console(url, port, user, PASSWORDS[user], proc, log)
    finally:
        proc.terminate()
        proc.wait(10)
