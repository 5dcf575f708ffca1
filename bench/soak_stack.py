"""The soak's own stack: a private Redis the bench may break, and processes it may kill.

:class:`SoakRedis` wraps :class:`producer.stack.EmbeddedRedis` with the three ways the soak
takes Redis away (down with its data, restarted with or without it). :class:`Fleet` runs
the supervisors and workers, tells the processes the bench killed from the ones that died
on their own, and restarts both kinds (as ``planloop up`` is meant to).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field

import redis

from planloop.producer.stack import EmbeddedRedis, Stack

# Seconds between two looks at the processes for ones that died on their own.
WATCH_INTERVAL_S = 0.25
# A dead process is replaced after a back-off that doubles with each death of its role in
# the last RESTART_WINDOW_S (0.5, 1, 2, 4 s, capped), so a crash loop does not eat the CPU.
RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 4.0
RESTART_WINDOW_S = 10.0


class SoakRedis:
    """A private redis-server on a fixed port that the soak stops, restarts and flushes."""

    def __init__(self, binary: str) -> None:
        self.server = EmbeddedRedis(binary=binary).start()
        self.client = redis.Redis.from_url(
            self.server.url, decode_responses=True, socket_timeout=10, socket_connect_timeout=2
        )
        # While the bench holds Redis down on purpose, its exit is not a death.
        self.down = threading.Event()

    @property
    def url(self) -> str:
        return self.server.url

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])

    def shutdown_saving(self) -> None:
        """``SHUTDOWN SAVE``: nothing written before the command is lost (unlike SAVE then
        SIGTERM, which drops what lands in between)."""
        self.down.set()
        with suppress(redis.RedisError):
            self.client.shutdown(save=True)
        assert self.server.process is not None
        self.server.process.wait(30)

    def start(self) -> None:
        self.server.start()
        self.down.clear()

    def restart(self, *, keep_data: bool) -> None:
        if keep_data:
            self.shutdown_saving()
            self.start()
        else:
            self.down.set()
            self.server.restart(keep_data=False)
            self.down.clear()

    def died_on_its_own(self) -> bool:
        process = self.server.process
        return not self.down.is_set() and process is not None and process.poll() is not None

    def close(self) -> None:
        self.client.close()
        self.server.stop()


@dataclass(frozen=True)
class Death:
    """A process that exited without the bench killing it."""

    role: str  # "supervisor" or "worker"
    pid: int
    returncode: int
    at: float  # time.time()


@dataclass
class Fleet:
    """Supervisors and workers of one :class:`Stack`; each role kept at its size."""

    stack: Stack
    pool: str
    concurrency: int
    lock: threading.RLock = field(default_factory=threading.RLock)
    killed: set[int] = field(default_factory=set)
    deaths: list[Death] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    roles: dict[int, str] = field(default_factory=dict)
    # (not before, role) of replacements waiting out their back-off.
    due: list[tuple[float, str]] = field(default_factory=list)

    def start(self, role: str) -> subprocess.Popen[bytes]:
        with self.lock:
            if role == "worker":
                proc = self.stack.start_worker(self.concurrency, self.pool)
            else:
                proc = self.stack.start_supervisor()
            self.roles[proc.pid] = role
            return proc

    def live(self, role: str) -> list[subprocess.Popen[bytes]]:
        with self.lock:
            return [
                p
                for p in self.stack.processes
                if self.roles.get(p.pid) == role and p.poll() is None
            ]

    def by_pid(self, pid: int) -> subprocess.Popen[bytes] | None:
        with self.lock:
            return next(
                (p for p in self.stack.processes if p.pid == pid and p.poll() is None), None
            )

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the process group (prefork children too), then start a replacement."""
        with self.lock:
            if proc.poll() is not None:
                return  # it died on its own first: the watchman counts and replaces it
            self.killed.add(proc.pid)
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            self.start(self.roles[proc.pid])

    def freeze(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.frozen.add(proc.pid)
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGSTOP)

    def thaw(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
            self.frozen.discard(proc.pid)

    def replace_the_dead(self) -> list[Death]:
        """Record each process that exited on its own; start another after a back-off."""
        found: list[Death] = []
        now = time.time()
        with self.lock:
            for proc in list(self.stack.processes):
                code = proc.poll()
                if code is None or proc.pid in self.killed:
                    continue
                self.killed.add(proc.pid)  # reported once
                role = self.roles[proc.pid]
                found.append(Death(role, proc.pid, code, now))
                recent = sum(
                    1 for d in self.deaths if d.role == role and d.at > now - RESTART_WINDOW_S
                )
                wait = min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2**recent)
                self.due.append((now + wait, role))
            self.deaths.extend(found)
            for when, role in [d for d in self.due if d[0] <= now]:
                self.due.remove((when, role))
                self.start(role)
        return found

    def stop(self) -> None:
        with self.lock:
            for proc in self.stack.processes:
                self.killed.add(proc.pid)
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)  # a stopped process cannot die of SIGTERM
            self.stack.stop()


class Watchman(threading.Thread):
    """Looks at the fleet (and Redis) every :data:`WATCH_INTERVAL_S` until stopped."""

    def __init__(self, fleet: Fleet, redis_server: SoakRedis) -> None:
        super().__init__(name="soak-watchman", daemon=True)
        self.fleet = fleet
        self.redis = redis_server
        self.halt = threading.Event()
        self.redis_deaths: list[float] = []

    def run(self) -> None:
        while not self.halt.wait(WATCH_INTERVAL_S):
            self.fleet.replace_the_dead()
            if self.redis.died_on_its_own():
                self.redis_deaths.append(time.time())
                self.redis.start()
