"""Real parts for integration tests: Redis, worker processes, a supervisor, the producer."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.effects import SqlEffectLedger
from planloop.core.errors import SessionNotFoundError
from planloop.core.heartbeat import live_workers
from planloop.core.hot_state import HotState, RedisEffectCache, connect
from planloop.core.keys import Keys
from planloop.core.models import SessionOptions, SessionRecord, StepState, StepStatus
from planloop.core.record import SqlRecord
from planloop.core.redis_client import redis_address
from planloop.core.shards import shard_holder
from planloop.planner.plan import Plan, parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, local_stack, redis_answers
from tests.conftest import wait_for
from tests.shipped import shipped


@pytest.fixture(scope="session")
def redis_client(test_settings: Settings) -> Iterator[redis.Redis]:
    if not redis_answers(test_settings.redis_url):
        pytest.fail(
            f"no Redis at {test_settings.redis_url}: run scripts/ensure-services.sh "
            "(make test does) or set PLANLOOP_TEST_REDIS_URL"
        )
    client = connect(test_settings.redis_url)
    yield client
    _delete_prefix(client, test_settings.key_prefix)
    client.close()


def _delete_prefix(client: redis.Redis, prefix: str) -> None:
    patterns = (
        f"{prefix}:*",
        prefix,
        f"{prefix}.*",  # pool queues (core/routing.py)
        f"_kombu.binding*.{prefix}",
        f"_kombu.binding*.{prefix}.*",
        f"{prefix}\x06*",
    )
    for pattern in patterns:
        batch = list(client.scan_iter(match=pattern, count=1000))
        if batch:
            client.delete(*batch)


@pytest.fixture(scope="session")
def stack(
    redis_client: redis.Redis,
    env_overrides: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """One worker (8 threads) and one supervisor for the whole test run, the worker's
    heartbeat written (``planloop submit`` refuses tools no live worker serves)."""
    log_dir: Path = tmp_path_factory.mktemp("logs")
    with local_stack(
        env_overrides, workers=1, supervisors=1, log_dir=log_dir, **shipped().stack_options()
    ) as running:
        keys, queue = Keys(env_overrides["PLANLOOP_KEY_PREFIX"]), env_overrides["PLANLOOP_QUEUE"]
        wait_for(lambda: live_workers(redis_client, keys, queue), 60, "the worker's heartbeat")
        yield running


@pytest.fixture(scope="session")
def producer(test_settings: Settings, redis_client: redis.Redis) -> Producer:
    return Producer.from_settings(test_settings)


@pytest.fixture(scope="session")
def hot_state(test_settings: Settings, redis_client: redis.Redis) -> HotState:
    return HotState(redis_client, Keys(test_settings.key_prefix))


@pytest.fixture(scope="session")
def effects(test_settings: Settings, redis_client: redis.Redis) -> Iterator[SqlEffectLedger]:
    cache = RedisEffectCache(redis_client, Keys(test_settings.key_prefix))
    ledger = SqlEffectLedger.from_settings(test_settings, cache)
    yield ledger
    ledger.dispose()


@pytest.fixture(scope="session")
def record(test_settings: Settings) -> SqlRecord:
    return SqlRecord.from_url(test_settings.database_url)


def wait_ended(producer: Producer, sid: str, timeout_s: float = 60) -> SessionRecord:
    """The session's record once it has ended."""

    def ended() -> SessionRecord | None:
        record = producer.session(sid)
        return record if record.status.ended else None

    return wait_for(ended, timeout_s, f"session {sid} to end")


RunPlan = Callable[..., tuple[str, SessionRecord]]


@pytest.fixture
def run_plan(stack: Stack, producer: Producer) -> RunPlan:
    """Submit a plan (YAML text, a dict or a Plan) on the shared stack and wait for its end.

    Returns the session id and its ended record.
    """

    def run(
        plan: str | dict[str, Any] | Plan,
        options: SessionOptions | None = None,
        timeout_s: float = 60,
    ) -> tuple[str, SessionRecord]:
        if isinstance(plan, str):
            plan = parse_plan(plan)
        elif isinstance(plan, dict):
            plan = Plan.model_validate(plan)
        sid = producer.submit(plan, options)
        return sid, wait_ended(producer, sid, timeout_s)

    return run


def report_steps(record: SessionRecord) -> dict[str, dict[str, Any]]:
    """The ended session's report entries by step id."""
    assert record.report is not None, f"session {record.id} ended without a report"
    return {s["id"]: s for s in record.report["steps"]}


# --- private stacks: processes a test may kill without disturbing the shared `stack` ---------
TAKEN = re.compile(r"session=(\S+) epoch=(\d+) taken by (\S+)")
OWNER_PID = re.compile(r"-(\d+)-[0-9a-f]{6}$")


@dataclass
class PrivateStack:
    """Workers and supervisors with their own key prefix, queue and SQLite file."""

    settings: Settings
    stack: Stack
    producer: Producer
    hot: HotState
    effects: SqlEffectLedger
    record: SqlRecord
    redis: redis.Redis
    supervisors: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def keys(self) -> Keys:
        return Keys(self.settings.key_prefix)

    def start_supervisor(self) -> subprocess.Popen[bytes]:
        proc = self.stack.start_supervisor()
        self.supervisors.append(proc)
        return proc

    def start_worker(
        self, concurrency: int = 8, pool: str = "threads", **pool_options: Any
    ) -> subprocess.Popen[bytes]:
        """``pool_options``: ``cwd``, ``tool_modules``, ``queues``, ``env``
        (:meth:`Stack.start_worker`)."""
        proc = self.stack.start_worker(concurrency, pool, **pool_options)
        self.workers.append(proc)
        return proc

    def signal(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the process group of ``proc`` (SIGKILL waits for the process)."""
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(10)

    def owner_process(self, sid: str) -> subprocess.Popen[bytes] | None:
        """The live supervisor process that holds the session's shard and adopted the
        session, if any."""
        owner = self.hot.session(sid).owner
        holder = shard_holder(self.redis, self.keys, sid, self.settings.session_shards)
        if holder is None or holder != owner:
            return None
        match = OWNER_PID.search(owner)
        if match is None:
            return None
        pid = int(match.group(1))
        return next(
            (p for p in self.supervisors if p.pid == pid and p.poll() is None),
            None,
        )

    def supervisor_log(self, proc: subprocess.Popen[bytes]) -> str:
        """The log of one supervisor process (looked up by its pid)."""
        for path in sorted(self.stack.log_dir.glob("supervisor-*.log")):
            text = path.read_text(errors="replace")
            if f"-{proc.pid}-" in text:
                return text
        return ""

    def takeovers(self, sid: str) -> dict[int, set[str]]:
        """Epoch -> names of the supervisors whose log says they took ``sid`` at that epoch."""
        seen: dict[int, set[str]] = {}
        for path in self.stack.log_dir.glob("supervisor-*.log"):
            for match in TAKEN.finditer(path.read_text(errors="replace")):
                if match.group(1) == sid:
                    seen.setdefault(int(match.group(2)), set()).add(match.group(3))
        return seen

    def step_states(self, sid: str, step_ids: list[str]) -> dict[str, StepState]:
        return self.hot.steps(sid, step_ids)

    def finish(
        self, sid: str, step_ids: list[str], timeout_s: float = 60, context: str = ""
    ) -> SessionRecord:
        """Wait for the session's end; on a time-out, fail naming the steps that are stuck."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with suppress(SessionNotFoundError):
                record = self.producer.session(sid)
                if record.status.ended:
                    return record
            time.sleep(0.05)
        stuck = {
            i: st.model_dump(include={"status", "attempt", "epoch", "started_at", "worker", "note"})
            for i, st in self.step_states(sid, step_ids).items()
            if st.status != StepStatus.COMPLETED
        }
        where = f"{context}: " if context else ""
        pytest.fail(f"{where}session {sid} did not end in {timeout_s:g}s; unfinished: {stuck}")

    def completed(self, sid: str, step_ids: list[str]) -> set[str]:
        states = self.hot.steps(sid, step_ids)
        return {i for i, st in states.items() if st.status == StepStatus.COMPLETED}

    def stop(self) -> None:
        for proc in self.stack.processes:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a stopped process cannot die of SIGTERM
        self.stack.stop()


MakeStack = Callable[..., PrivateStack]


@pytest.fixture
def private_stack(
    redis_client: redis.Redis,
    test_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MakeStack]:
    """A factory of :class:`PrivateStack` (own prefix/queue/SQLite); stopped and wiped after."""
    made: list[PrivateStack] = []

    def make(
        *,
        workers: int = 1,
        supervisors: int = 1,
        concurrency: int = 8,
        redis_url: str | None = None,
        **overrides: Any,
    ) -> PrivateStack:
        """``redis_url``: a private Redis (``private_redis``, a sentinel cluster's URL with
        ``redis_sentinel_master``) instead of the shared one."""
        if redis_url:
            overrides["redis_url"] = redis_url
        prefix = f"{test_settings.key_prefix}x{uuid.uuid4().hex[:6]}"
        directory = tmp_path_factory.mktemp(prefix)
        settings = Settings(
            **{
                **test_settings.model_dump(),
                "key_prefix": prefix,
                "queue": prefix,
                "database_url": f"sqlite:///{directory / 'planloop.db'}",
                "effect_audit_path": str(directory / "effects.jsonl"),
                **overrides,
            }
        )
        log_dir = directory / "logs"
        log_dir.mkdir()
        keys = Keys(prefix)
        # redis_url=... points the stack at a private Redis (a fault test's own server).
        client = connect(redis_address(settings)) if "redis_url" in overrides else redis_client
        built = PrivateStack(
            settings=settings,
            stack=shipped().stack({**os.environ, **settings.to_env()}, log_dir),
            producer=Producer.from_settings(settings),
            hot=HotState(client, keys),
            effects=SqlEffectLedger.from_settings(settings, RedisEffectCache(client, keys)),
            record=SqlRecord.from_url(settings.database_url),
            redis=client,
        )
        made.append(built)
        for _ in range(workers):
            built.start_worker(concurrency)
        for _ in range(supervisors):
            built.start_supervisor()
        return built

    yield make
    for built in made:
        built.stop()
        built.producer.state.r.close()
        built.record.engine.dispose()
        built.effects.dispose()
        if built.redis is not redis_client:
            built.redis.close()
        _delete_prefix(redis_client, built.settings.key_prefix)


# The planning-loop fixtures (scripted LLM server, a stack that talks to it) live in their
# own module; importing them here is how pytest finds them.
from tests.integration.llm_conftest import (  # noqa: E402, F401
    lessons,
    llm,
    llm_effects,
    llm_hot,
    llm_producer,
    llm_record,
    llm_server,
    llm_settings,
    llm_stack,
)
