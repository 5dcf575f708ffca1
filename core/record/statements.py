"""The INSERT statements every write shares, on SQLite and PostgreSQL alike: upsert, insert
once (by content address), and the row values of an event and a blob."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from planloop.core.models import Event
from planloop.core.record.tables import Base


def event_values(sid: str, event_id: str, ev: Event) -> dict[str, Any]:
    return {
        "session_id": sid,
        "event_id": event_id,
        "type": ev.type.value,
        "severity": ev.severity.value,
        "step_id": ev.step_id,
        "attempt": ev.attempt,
        "description": ev.description,
        "payload": json.dumps(ev.payload, default=str),
        "occurred_at": ev.occurred_at,
        "actor": ev.actor[:128],
    }


def bump_statement(sessions: Table, ended: Sequence[str], columns: Sequence[str]) -> Update:
    """The fenced UPDATE of a session row (id ``b_sid`` at epoch ``b_epoch``, not ended)
    setting ``columns`` from the parameters ``v_<column>``.

    Built once per set of columns and kept (:class:`BumpStatements`): constructing the
    statement and its cache key for every session of every checkpoint was half the SQL
    thread's time, held under the GIL the event loop needs.
    """
    return (
        update(sessions)
        .where(
            sessions.c.id == bindparam("b_sid"),
            sessions.c.epoch == bindparam("b_epoch"),
            sessions.c.status.notin_(ended),  # ended is written once
        )
        .values({c: bindparam(f"v_{c}") for c in columns})
    )


class BumpStatements:
    """:func:`bump_statement` per set of columns, kept for the record's lifetime (a few
    shapes: a turn's fields, an end's, a re-plan's)."""

    def __init__(self, sessions: Table, ended: Sequence[str]) -> None:
        self._sessions = sessions
        self._ended = list(ended)
        self._made: dict[tuple[str, ...], Update] = {}

    def execute(self, db: Session, sid: str, epoch: int, values: dict[str, Any]) -> int:
        """Bump one session's row with ``values``; the rows it changed (0: fenced out)."""
        columns = tuple(values)
        statement = self._made.get(columns)
        if statement is None:
            statement = self._made[columns] = bump_statement(self._sessions, self._ended, columns)
        params = {"b_sid": sid, "b_epoch": epoch, **{f"v_{c}": v for c, v in values.items()}}
        return int(db.execute(statement, params).rowcount)  # type: ignore[attr-defined]


def blob_values(digest: str, text: str) -> dict[str, Any]:
    return {"digest": digest, "data": text, "size": len(text), "created_at": time.time()}


def insert_new(db: Session, model: type[Base], rows: list[dict[str, Any]]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING (SQLite and PostgreSQL): a row by content address
    that is there already is the same row."""
    if not rows:
        return
    table = cast(Table, model.__table__)
    insert = (
        pg_insert(table) if db.get_bind().dialect.name == "postgresql" else sqlite_insert(table)
    )
    db.execute(insert.on_conflict_do_nothing(), rows)


def upsert(db: Session, model: type[Base], rows: list[dict[str, Any]]) -> None:
    """INSERT ... ON CONFLICT DO UPDATE for many rows (SQLite and PostgreSQL).

    One statement executed with many parameter sets: compiled once and cached, and
    batched by SQLAlchemy's insertmanyvalues.
    """
    if not rows:
        return
    table = cast(Table, model.__table__)
    dialect = db.get_bind().dialect.name
    shape = (table.name, dialect, tuple(rows[0]))
    statement = _UPSERTS.get(shape)
    if statement is None:  # built once per table and columns, as the bump statements are
        keys = [c.name for c in table.primary_key.columns]
        # On the table, not the mapped class: a Core executemany, without the ORM's per-row
        # bulk-insert bookkeeping (a fifth less CPU per checkpoint row on SQLite, measured).
        insert = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
        updates = {c: insert.excluded[c] for c in rows[0] if c not in keys}
        statement = _UPSERTS[shape] = insert.on_conflict_do_update(
            index_elements=keys, set_=updates
        )
    db.execute(statement, rows)


# (table, dialect, columns) -> its upsert statement; a few shapes per table
_UPSERTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}
