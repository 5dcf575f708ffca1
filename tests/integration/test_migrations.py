"""Alembic migrations of the SQL record, on SQLite and on PostgreSQL (a throwaway database).

Every revision is upgraded to from its predecessor (and the first from an empty database),
and the result must equal the models of ``core/record/tables.py``: a model change without its
revision fails here.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine, make_url

from planloop.core import migrate
from planloop.core.record import Base, SqlRecord, make_engine
from tests.conftest import TEST_PG_URL
from tests.shipped import shipped

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind; the PostgreSQL one is created and dropped here."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'record.db'}"
        return
    name = f"pl_mig_{uuid.uuid4().hex[:10]}"
    admin = create_engine(
        make_url(TEST_PG_URL).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(TEST_PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


def schema_diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))


def revisions() -> list[tuple[str, str | None]]:
    """(revision, its predecessor) oldest first."""
    script = ScriptDirectory.from_config(migrate.alembic_config())
    chain = [(r.revision, r.down_revision) for r in script.walk_revisions()]
    return [
        (rev, down if isinstance(down, str) or down is None else down[0])
        for rev, down in reversed(chain)
    ]


def test_upgrade_from_an_empty_database_matches_the_models(engine: Engine) -> None:
    assert migrate.current_revision(engine) is None
    assert migrate.upgrade(engine) == migrate.head_revision()
    assert schema_diff(engine) == []
    # a second upgrade is a no-op
    assert migrate.upgrade(engine) == migrate.head_revision()


@pytest.mark.parametrize(("revision", "previous"), revisions())
def test_upgrade_from_the_previous_revision(
    engine: Engine, revision: str, previous: str | None
) -> None:
    if previous is not None:
        migrate.upgrade(engine, previous)
        assert migrate.current_revision(engine) == previous
    migrate.upgrade(engine, revision)
    assert migrate.current_revision(engine) == revision
    migrate.upgrade(engine)
    assert schema_diff(engine) == []


def test_a_record_made_by_create_all_is_adopted_with_its_rows(engine: Engine) -> None:
    Base.metadata.create_all(engine)  # how records were made before migrations
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO sessions (id, status, goal, epoch, owner, plan_version, replans,"
                " created_at, updated_at, finished_at, error, options)"
                " VALUES ('s1', 'completed', 'g', 1, '', 1, 0, 0, 0, 0, '', '{}')"
            )
        )
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert schema_diff(engine) == []
    record = SqlRecord(engine)
    row = record.session("s1")
    assert row is not None
    assert row.status == "completed"


def test_a_schema_behind_is_refused_with_what_to_run(db_url: str, engine: Engine) -> None:
    with pytest.raises(migrate.SchemaBehindError, match="run `planloop db upgrade`"):
        SqlRecord.from_url(db_url, auto_migrate=False)
    assert "sessions" not in inspect(engine).get_table_names()  # nothing was created
    record = SqlRecord.from_url(db_url)  # the default upgrades
    record.engine.dispose()
    SqlRecord.from_url(db_url, auto_migrate=False).engine.dispose()  # now current


def test_db_commands_and_a_supervisor_that_refuses(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {
        **os.environ,
        "PLANLOOP_DATABASE_URL": url,
        "PLANLOOP_DB_AUTO_MIGRATE": "false",
        "PLANLOOP_REDIS_URL": "redis://127.0.0.1:1/0",
    }

    def planloop(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*shipped().cli(), *args],
            env=shipped().env(env),
            cwd=shipped().home,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    behind = planloop("db", "current")
    assert behind.returncode == 1
    assert "current (none)" in behind.stdout
    refused = planloop("supervisor")
    assert refused.returncode == 1
    assert "planloop db upgrade" in refused.stderr
    assert "Traceback" not in refused.stderr
    upgraded = planloop("db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"revision {migrate.head_revision()}" in upgraded.stdout
    assert planloop("db", "current").returncode == 0


OPENER = """
import pathlib, sys, time
from planloop.core.record import SqlRecord
go = pathlib.Path(sys.argv[2])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
SqlRecord.from_url(sys.argv[1]).engine.dispose()
"""


@pytest.mark.timeout(400)  # 20 interpreters that each import the package and migrate
def test_processes_that_start_together_on_a_new_sqlite_file_all_find_it_current(
    tmp_path: Path,
) -> None:
    """A supervisor, a worker and a producer started at once on a new file each upgrade it
    (``SqlRecord.from_url``): they take turns (a lock beside the file), so none fails with
    "table ... already exists". Without the lock about one run in three failed here."""
    for run in range(5):
        url = f"sqlite:///{tmp_path / f'together{run}.db'}"
        go = tmp_path / f"go{run}"
        racers = [
            subprocess.Popen(
                [str(shipped().python), "-c", OPENER, url, str(go)],
                env=shipped().env(),
                cwd=shipped().home,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        go.touch()
        outcomes = [racer.communicate(timeout=120) for racer in racers]
        codes = [racer.returncode for racer in racers]
        assert codes == [0] * 4, [err[-500:] for _, err in outcomes]
        engine = create_engine(url)
        try:
            assert migrate.current_revision(engine) == migrate.head_revision()
        finally:
            engine.dispose()
