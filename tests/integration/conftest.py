"""Real parts for integration tests: Redis, worker processes, a supervisor, the producer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from config.settings import Settings
from core.hot_state import HotState, RedisEffectLedger, connect
from core.keys import Keys
from core.models import SessionOptions, SessionRecord
from core.record import SqlRecord
from planner.plan import Plan, parse_plan
from producer.client import Producer
from producer.stack import Stack, local_stack, redis_answers
from tests.conftest import wait_for


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
    patterns = (f"{prefix}:*", prefix, f"_kombu.binding*.{prefix}", f"{prefix}\x06*")
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
    """One worker (8 threads) and one supervisor for the whole test run."""
    log_dir: Path = tmp_path_factory.mktemp("logs")
    with local_stack(env_overrides, workers=1, supervisors=1, log_dir=log_dir) as running:
        yield running


@pytest.fixture(scope="session")
def producer(test_settings: Settings, redis_client: redis.Redis) -> Producer:
    return Producer.from_settings(test_settings)


@pytest.fixture(scope="session")
def hot_state(test_settings: Settings, redis_client: redis.Redis) -> HotState:
    return HotState(redis_client, Keys(test_settings.key_prefix))


@pytest.fixture(scope="session")
def effects(test_settings: Settings, redis_client: redis.Redis) -> RedisEffectLedger:
    return RedisEffectLedger(redis_client, Keys(test_settings.key_prefix))


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
