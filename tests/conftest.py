"""Fixtures shared by every test: settings pointing at a private Redis key space."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.producer.stack import EmbeddedRedis, redis_server_binary
from planloop.workers.toolsets import BENCH_TOOLS
from tests.console_users import FLOWER_LOGIN, users_setting
from tests.shipped import SHIPPED_VENV, ensure_venv

T = TypeVar("T")

# Tests use their own Redis database number and key prefix, and clean up after themselves.
TEST_REDIS_URL = os.environ.get("PLANLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
TEST_REDIS_DB = int(os.environ.get("PLANLOOP_TEST_REDIS_DB", "13"))
# The redis-server binary fault tests start on private ports: the same line as the shared one.
TEST_REDIS_SERVER = os.environ.get("PLANLOOP_TEST_REDIS_SERVER", "")
TEST_PG_URL = os.environ.get(
    "PLANLOOP_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextlib.contextmanager
def own_pg_database(prefix: str) -> Iterator[str]:
    """The URL of a PostgreSQL database of the caller's own (named ``prefix`` + a uuid),
    dropped afterwards. A server at TEST_PG_URL that cannot be used fails the test, as it
    fails every other PostgreSQL test: `make test` starts one (scripts/ensure-services.sh),
    so a skip would only hide a broken set-up."""
    from sqlalchemy import create_engine, make_url, text

    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    admin = create_engine(TEST_PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at {TEST_PG_URL} unusable: {exc}")
    url = make_url(TEST_PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


PRIVATE_PG = "PLANLOOP_TEST_PG_PRIVATE"  # set once this run's own database exists


def pytest_configure(config: pytest.Config) -> None:
    """Once per run, before any xdist worker starts (they inherit the environment):

    - build (or find) the shipped venv, so the whole run tests one wheel even if the
      checkout changes meanwhile;
    - make the run a PostgreSQL database of its own (``TEST_PG_URL``), dropped at the end:
      the server is shared with other runs and checkouts, whose migrations may stand at
      revisions this one does not know.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if config.args and all(str(arg).startswith("tests/unit") for arg in config.args):
        return  # unit tests start no shipped process and use no PostgreSQL
    if not os.environ.get(SHIPPED_VENV):
        os.environ[SHIPPED_VENV] = str(ensure_venv())
    if not os.environ.get(PRIVATE_PG):
        private = create_private_database(TEST_PG_URL)
        if private is not None:
            os.environ["PLANLOOP_TEST_PG_URL"] = private
            os.environ[PRIVATE_PG] = private
            globals()["TEST_PG_URL"] = private


def pytest_unconfigure(config: pytest.Config) -> None:
    private = os.environ.get(PRIVATE_PG)
    if private and not os.environ.get("PYTEST_XDIST_WORKER"):
        drop_database(private)
        del os.environ[PRIVATE_PG]


def _admin(url: str) -> Any:
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    server = make_url(url).set(database="postgres")
    return create_engine(server, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})


def create_private_database(url: str) -> str | None:
    """A new database beside ``url``'s on the same server, its URL; None where the server
    cannot be had (the PostgreSQL tests then say so themselves)."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    name = f"{make_url(url).database or 'test'}_{uuid.uuid4().hex[:10]}"
    try:
        admin = _admin(url)
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
    except (SQLAlchemyError, ImportError, OSError):
        return None
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    try:
        admin = _admin(url)
        try:
            with admin.connect() as conn:
                name = make_url(url).database
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()
    except SQLAlchemyError:
        pass  # a database left behind is only clutter


def wait_for(predicate: Callable[[], T], timeout_s: float = 30.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test on time-out."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="session")
def run_id() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def test_settings(run_id: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings of this test run: own key prefix and queue, own SQLite file."""
    db_file: Path = tmp_path_factory.mktemp("sql") / "planloop.db"
    return Settings(
        redis_url=f"{TEST_REDIS_URL}/{TEST_REDIS_DB}",
        key_prefix=run_id,
        queue=run_id,
        database_url=f"sqlite:///{db_file}",
        # Write tools log each real application here: tests count effects outside Redis.
        effect_audit_path=str(db_file.parent / "effects.jsonl"),
        default_step_timeout_s=30,
        retry_backoff_s=0.05,
        watchdog_grace_s=1.0,
        lease_ttl_s=1.5,
        # Tests inject failures into the bundled tools all the time; the breaker tests use
        # a stack of their own with a low threshold.
        breaker_failures=100_000,
        tool_modules=[BENCH_TOOLS],  # the bench.* tools most tests run
        # a console and Flower of the tests have their own logins (tests/console_users.py)
        console_users=SecretStr(users_setting()),
        flower_basic_auth=SecretStr(FLOWER_LOGIN),
        secrets_dir=str(db_file.parent / "secrets"),
    )


@pytest.fixture(scope="session")
def env_overrides(test_settings: Settings) -> dict[str, str]:
    return test_settings.to_env()


@pytest.fixture(autouse=True)
def _no_planloop_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own PLANLOOP_* variables must not leak into tests."""
    for name in list(os.environ):
        if name.startswith("PLANLOOP_") and not name.startswith("PLANLOOP_TEST_"):
            monkeypatch.delenv(name)


MakeRedis = Callable[[], EmbeddedRedis]


@pytest.fixture
def private_redis() -> Iterator[MakeRedis]:
    """A factory of private Redis servers (free port, own directory) that a fault test may
    kill, flush or restart (``restart(keep_data=...)``); all stopped after the test.

    The binary is ``PLANLOOP_TEST_REDIS_SERVER`` when set (the suite runs once per Redis
    line), else the one the demo would embed.
    """
    started: list[EmbeddedRedis] = []

    def make() -> EmbeddedRedis:
        server = EmbeddedRedis(binary=TEST_REDIS_SERVER or redis_server_binary()).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
