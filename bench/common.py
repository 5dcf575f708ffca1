"""Shared benchmark helpers: a private Redis key space, a running stack, percentiles, tables."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis
from rich.console import Console
from rich.table import Table

from planloop.config.settings import Settings
from planloop.core.hot_state import connect
from planloop.producer.client import Producer
from planloop.producer.stack import EmbeddedRedis, Stack, local_stack, redis_answers
from planloop.workers.toolsets import BENCH_TOOLS

REPO_ROOT = Path(__file__).resolve().parents[1]
# Benchmarks use their own Redis database so they never touch a developer's or the tests' keys.
BENCH_REDIS_URL = "redis://127.0.0.1:6379/14"

# Wide enough for the tables when stdout is a pipe (rich falls back to 80 columns there).
console = Console(highlight=False, width=max(120, shutil.get_terminal_size().columns))


@dataclass(frozen=True)
class BenchEnv:
    """Where one benchmark run lives: its Redis, key prefix, queue and temp directory."""

    settings: Settings
    directory: Path
    redis: redis.Redis

    @property
    def env(self) -> dict[str, str]:
        """The environment of child processes that share these settings."""
        return self.settings.to_env()


@contextmanager
def bench_env(name: str, *, private_redis: bool = False, **overrides: object) -> Iterator[BenchEnv]:
    """Settings with a private key prefix and queue on db 14 (or an embedded Redis).

    With ``private_redis`` the run always gets a redis-server of its own, so server-wide
    counters (``INFO commandstats``) hold this run's traffic only. The prefix's keys and
    the queue's keys are deleted on the way out.
    """
    embedded = None
    url = BENCH_REDIS_URL
    if private_redis or not redis_answers(url):
        embedded = EmbeddedRedis().start()
        url = embedded.url
    directory = Path(tempfile.mkdtemp(prefix=f"planloop-{name}-"))
    run_id = f"{name}{uuid.uuid4().hex[:8]}"
    settings = Settings(
        redis_url=url,
        key_prefix=run_id,
        queue=run_id,
        database_url=f"sqlite:///{directory / 'planloop.db'}",
        **{"tool_modules": [BENCH_TOOLS], **overrides},  # type: ignore[arg-type]
    )
    client = connect(url)
    try:
        yield BenchEnv(settings, directory, client)
    finally:
        delete_keys(client, run_id)
        client.close()
        shutil.rmtree(directory, ignore_errors=True)
        if embedded is not None:
            embedded.stop()


def delete_keys(client: redis.Redis, run_id: str) -> int:
    """Delete every key of the run: its prefix, its Celery queue and the queue's bindings."""
    deleted = 0
    patterns = (
        f"{run_id}:*",
        run_id,
        f"{run_id}\x06*",  # kombu's priority sub-queues
        f"_kombu.binding.{run_id}",
        f"_kombu.binding_permanent.{run_id}",
    )
    for pattern in patterns:
        batch = list(client.scan_iter(match=pattern, count=1000))
        if batch:
            deleted += int(client.delete(*batch))
    return deleted


@contextmanager
def planloop_stack(
    bench: BenchEnv, *, concurrency: int = 8, workers: int = 1
) -> Iterator[tuple[Stack, Producer]]:
    """``workers`` worker processes (``concurrency`` threads each) and one supervisor, plus
    a producer."""
    log_dir = bench.directory / "logs"
    log_dir.mkdir(exist_ok=True)
    with local_stack(
        bench.env, workers=workers, supervisors=1, concurrency=concurrency, log_dir=log_dir
    ) as stack:
        yield stack, Producer.from_settings(bench.settings)


@contextmanager
def bare_worker(
    bench: BenchEnv, *, concurrency: int = 8, index: int = 0
) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker for :mod:`bench.bare_tasks`, same pool and concurrency as ours;
    ``index`` tells several apart (node name and log file)."""
    env = {**os.environ, **bench.env, "PYTHONPATH": str(REPO_ROOT)}
    suffix = f"-{index}" if index else ""
    log_path = bench.directory / f"bare-worker{suffix}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.bare_tasks",
                "worker",
                "-Q",
                bench.settings.queue,
                "-c",
                str(concurrency),
                "-P",
                "threads",
                "--loglevel",
                "WARNING",
                "-n",
                f"bare{suffix}-{os.getpid()}@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            env=env,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def wait_for(
    predicate: Callable[[], object], timeout_s: float, what: str, poll_s: float = 0.005
) -> None:
    """Poll ``predicate`` until truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(poll_s)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux ``/proc``; else None)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds that named processes spend between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float | None] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> None:
        for name, pid in self.pids.items():
            before, after = self._start.get(name), cpu_seconds(pid)
            if before is not None and after is not None:
                self.used[name] = after - before

    def per_item_ms(self, n: int) -> str:
        """E.g. ``supervisor 0.91 + worker 1.50 + redis 0.37 = 2.78``; '' without /proc."""
        if not self.used:
            return ""
        used = self.used.items()
        parts = " + ".join(f"{name} {seconds / n * 1000:.2f}" for name, seconds in used)
        return f"{parts} = {sum(self.used.values()) / n * 1000:.2f}"


def redis_pid(client: redis.Redis) -> int | None:
    """The Redis server's pid when it runs on this machine (its /proc entry is visible)."""
    pid = int(cast(dict[str, Any], client.info("server")).get("process_id", 0))
    return pid if pid and Path(f"/proc/{pid}").exists() else None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A rich table on stdout."""
    table = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
