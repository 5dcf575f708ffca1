"""Migrations of the SQL record (Alembic): upgrade it, or check it is current.

The revisions live in ``core/migrations/versions`` and ship in the package. A new table or
column is a new revision there (``down_revision`` = the current head); the test suite fails
while the models in :mod:`core.record` and the revisions disagree.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from planloop.core.errors import ConfigError
from planloop.core.redis_faults import redact_url

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
UPGRADE_HINT = "run `planloop db upgrade` (with the same PLANLOOP_DATABASE_URL)"


class SchemaBehindError(ConfigError):
    """The record's schema is older than this version of Planloop needs."""

    def __init__(self, url: str, current: str | None, head: str) -> None:
        self.current, self.head = current, head
        where = redact_url(url)
        have = f"revision {current}" if current else "no schema"
        super().__init__(
            f"the SQL record at {where} has {have}; this Planloop needs revision {head}: "
            f"{UPGRADE_HINT}, or set PLANLOOP_DB_AUTO_MIGRATE=true"
        )


def alembic_config() -> Config:
    """Alembic's configuration without an ini file: the revisions shipped in the package."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    """The newest revision this version of Planloop ships."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations shipped"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database at ``engine`` is at; None before the first upgrade."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Bring the record to ``revision`` (the newest by default); the revision it is at now.

    Two processes upgrading at once are fine: PostgreSQL takes turns (an advisory lock in
    ``env.py``), and so do processes on one SQLite file (:func:`_sqlite_turn`); on another
    database the loser's failure is forgiven when the winner reached the head.

    Raises:
        ConfigError: ``revision`` is not one of the shipped migrations (nothing was run).
    """
    config = alembic_config()
    check_revision(revision)
    with _sqlite_turn(engine):
        if revision == "head" and current_revision(engine) == head_revision():
            return head_revision()  # the process before us in line upgraded it
        try:
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, revision)
        except DBAPIError:
            if revision != "head" or current_revision(engine) != head_revision():
                raise
        return current_revision(engine)


def check_revision(revision: str) -> None:
    """Raises ConfigError unless ``revision`` names a shipped migration (an id, a unique
    prefix of one, ``head``, ``heads`` or ``base``; relative ones like ``+1`` are Alembic's
    to resolve)."""
    if revision in ("head", "heads", "base") or revision[:1] in ("+", "-"):
        return
    script = ScriptDirectory.from_config(alembic_config())
    try:
        found = script.get_revisions(revision)
    except CommandError:
        found = ()
    if not found:
        known = ", ".join(sorted(s.revision for s in script.walk_revisions()))
        raise ConfigError(
            f"--revision {revision[:80]!r} is not a revision of the record's migrations "
            f"(known: {known}, or head)",
            setting="--revision",
        )


@contextmanager
def _sqlite_turn(engine: Engine) -> Iterator[None]:
    """Hold an exclusive lock on ``<file>.migrate-lock`` beside an SQLite record while it is
    upgraded: a supervisor, a worker and a producer that start together on a new file would
    otherwise each see no schema and run the first revision at once ("table sessions
    already exists"), and SQLite's DDL is not transactional enough to let one of them lose
    cleanly; and a new file's first connections, each switching it to WAL, would meet
    "database is locked". Other databases pass through."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    with open(f"{database}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        yield


def check(engine: Engine) -> None:
    """Raise unless the record is at the head revision.

    Raises:
        SchemaBehindError: the schema is missing or behind; the message says what to run.
    """
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaBehindError(engine.url.render_as_string(hide_password=False), current, head)


def prepare(engine: Engine, *, auto_migrate: bool) -> None:
    """Upgrade the record when ``auto_migrate``, else check that it is current.

    Raises:
        SchemaBehindError: not ``auto_migrate`` and the schema is behind.
    """
    if auto_migrate:
        upgrade(engine)  # it reads the revision in its turn: a first connection (WAL) too
        return
    check(engine)
