"""Fixtures of the planning-loop tests: a scripted LLM server and a stack that talks to it.

The stack has its own key prefix, queue and SQL file, so its supervisor (which has an LLM)
never takes a session meant for the rule-policy stack of ``conftest.py`` and vice versa.
``tests/integration/conftest.py`` imports these fixtures so pytest finds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.core.effects import SqlEffectLedger
from planloop.core.heartbeat import live_workers
from planloop.core.hot_state import HotState, RedisEffectCache, connect
from planloop.core.keys import Keys
from planloop.core.lessons import LessonStore
from planloop.core.models import SessionRecord, SessionStatus
from planloop.core.record import SqlRecord, make_engine
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, local_stack
from tests.conftest import wait_for
from tests.llm_server import ScriptedLLMServer
from tests.shipped import shipped

ENDED = frozenset(s.value for s in SessionStatus if s.ended)


@pytest.fixture(scope="session")
def llm_server() -> Iterator[ScriptedLLMServer]:
    """One scripted OpenAI-compatible server for the whole run; ``llm`` resets it per test."""
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
def llm(llm_server: ScriptedLLMServer, llm_stack: Stack) -> Iterator[ScriptedLLMServer]:
    """The scripted server, with no scripts and no recorded requests left by another test."""
    llm_server.wait_quiet(0.5)  # the last test's sessions' calls after their end
    llm_server.reset()
    yield llm_server
    llm_server.reset()


@pytest.fixture(scope="session")
def llm_settings(
    test_settings: Settings,
    llm_server: ScriptedLLMServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Settings:
    """The test settings with an LLM endpoint, and a key prefix, queue and SQL file of its own."""
    db_file: Path = tmp_path_factory.mktemp("llm-sql") / "planloop.db"
    prefix = f"{test_settings.key_prefix}llm"
    return test_settings.model_copy(
        update={
            "key_prefix": prefix,
            "queue": prefix,
            "database_url": f"sqlite:///{db_file}",
            "llm_base_url": llm_server.base_url,
            "llm_api_key": SecretStr("test"),
            "llm_max_retries": 0,
        }
    )


@pytest.fixture(scope="session")
def llm_stack(
    redis_client: redis.Redis,
    llm_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """One worker and one supervisor that plan and decide with the scripted server."""
    from tests.integration.conftest import _delete_prefix

    log_dir: Path = tmp_path_factory.mktemp("llm-logs")
    try:
        with local_stack(
            llm_settings.to_env(),
            workers=1,
            supervisors=1,
            log_dir=log_dir,
            **shipped().stack_options(),
        ) as running:
            # `planloop submit` refuses toolsets no live worker serves: wait for its heartbeat
            keys = Keys(llm_settings.key_prefix)
            wait_for(
                lambda: live_workers(redis_client, keys, llm_settings.queue),
                60,
                "the worker's heartbeat",
            )
            yield running
    finally:
        client = connect(llm_settings.redis_url)
        _delete_prefix(client, llm_settings.key_prefix)
        client.close()


@pytest.fixture
def lessons(llm_settings: Settings) -> Iterator[LessonStore]:
    """The LLM stack's lessons store, emptied before and after (other tests share the stack)."""
    store = LessonStore(make_engine(llm_settings.database_url))
    for row in store.all():
        store.delete(row.id)
    yield store
    for row in store.all():
        store.delete(row.id)


@pytest.fixture(scope="session")
def llm_producer(llm_settings: Settings, llm_stack: Stack) -> Producer:
    return Producer.from_settings(llm_settings)


@pytest.fixture(scope="session")
def llm_hot(llm_settings: Settings, redis_client: redis.Redis) -> HotState:
    return HotState(redis_client, Keys(llm_settings.key_prefix))


@pytest.fixture(scope="session")
def llm_effects(llm_settings: Settings, redis_client: redis.Redis) -> Iterator[SqlEffectLedger]:
    cache = RedisEffectCache(redis_client, Keys(llm_settings.key_prefix))
    ledger = SqlEffectLedger.from_settings(llm_settings, cache)
    yield ledger
    ledger.dispose()


@pytest.fixture(scope="session")
def llm_record(llm_settings: Settings) -> SqlRecord:
    return SqlRecord.from_url(llm_settings.database_url)


def wait_recorded(
    producer: Producer, record: SqlRecord, sid: str, timeout_s: float = 30
) -> SessionRecord:
    """The session's hot record once it has ended *and* its end is checkpointed to SQL.

    The supervisor marks the end in Redis before its last SQL checkpoint, so a test that
    reads decisions or LLM calls waits for the SQL row too.
    """

    def ended() -> SessionRecord | None:
        hot = producer.session(sid)
        row = record.session(sid)
        return hot if hot.status.ended and row is not None and row.status in ENDED else None

    found = wait_for(ended, timeout_s, f"session {sid} to end and be recorded")
    assert found is not None  # wait_for returns only a truthy value
    return found
