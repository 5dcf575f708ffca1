"""The SQLAlchemy engine of the record: SQLite shared by processes (WAL, busy timeout),
PostgreSQL without NUL in its text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

SQLITE_BUSY_S = 30.0


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and a busy timeout so processes can share it.

    Raises:
        ConfigError: ``url`` is not a URL of a backend the record runs on, or its driver is
            not installed (names PLANLOOP_DATABASE_URL; core/settings_check.py).
    """
    from planloop.core.settings_check import check_database_url

    check_database_url(url)  # SQLAlchemy's own errors here are tracebacks a user cannot act on
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
    is_sqlite = url.startswith("sqlite")
    engine = create_engine(
        url,
        future=True,
        pool_pre_ping=not is_sqlite,
        connect_args={"timeout": SQLITE_BUSY_S} if is_sqlite else {},
    )
    if engine.dialect.name == "postgresql":
        # PostgreSQL text cannot hold NUL; a goal or an error carrying one must not wedge
        # the session at its claim (DataError forever): NUL becomes U+FFFD, visibly.
        @event.listens_for(engine, "before_cursor_execute", retval=True)
        def _no_nul(
            _conn: Any, _cursor: Any, statement: str, params: Any, _context: Any, _many: bool
        ) -> tuple[str, Any]:
            return statement, without_nul(params)

    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _pragmas(conn: Any, _record: Any) -> None:
            cur = conn.cursor()
            try:
                _into_wal(cur)
                cur.execute("PRAGMA synchronous=NORMAL")
            finally:
                cur.close()

    return engine


def _is_busy(exc: BaseException) -> bool:
    return "database is locked" in str(exc) or "database is busy" in str(exc)


@retry(
    retry=retry_if_exception(_is_busy),
    wait=wait_random_exponential(multiplier=0.01, max=0.5),
    stop=stop_after_delay(SQLITE_BUSY_S),
    reraise=True,
)
def _into_wal(cur: Any) -> None:
    """Put the database file in WAL mode unless it already is.

    WAL is a property of the file, so only the first connection to a fresh file switches it.
    Switching needs the file to itself, and SQLite answers "database is locked" at once,
    without its busy handler, when another process opens the same fresh file in that moment:
    so the switch is tried again for as long as the busy timeout would have waited.
    """
    if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    cur.execute("PRAGMA journal_mode=WAL")


def without_nul(value: Any) -> Any:
    """``value`` (statement parameters) with every NUL in a string replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {k: without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(without_nul(v) for v in value)
    return value
