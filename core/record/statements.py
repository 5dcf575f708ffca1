"""The INSERT statements every write shares, on SQLite and PostgreSQL alike: upsert, insert
once (by content address), and the row values of an event and a blob."""

from __future__ import annotations

import functools
import json
import time
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from planloop.core.models import Event
from planloop.core.record.tables import ENDED_STATUSES, Base, SessionRow


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


@functools.cache
def bump_statement(columns: tuple[str, ...]) -> Update:
    """The fenced UPDATE of a session row (id ``b_sid`` at epoch ``b_epoch``, not ended)
    setting ``columns`` from the parameters ``v_<column>``.

    Cached per set of columns (a few shapes: a turn's fields, an end's, a re-plan's):
    constructing the statement and its cache key for every session of every checkpoint was
    half the SQL thread's time, held under the GIL the event loop needs.
    """
    # On the table, not the mapped class: a Core UPDATE, without the ORM's bulk-update
    # bookkeeping (synchronising the session) per row of a thousand sessions.
    sessions = cast(Table, SessionRow.__table__)
    return (
        update(sessions)
        .where(
            sessions.c.id == bindparam("b_sid"),
            sessions.c.epoch == bindparam("b_epoch"),
            sessions.c.status.notin_(ENDED_STATUSES),  # ended is written once
        )
        .values({c: bindparam(f"v_{c}") for c in columns})
    )


def bump(db: Session, sid: str, epoch: int, values: dict[str, Any]) -> int:
    """Bump session ``sid``'s row at ``epoch`` with ``values``; the rows it changed (0: fenced
    out or ended)."""
    params = {"b_sid": sid, "b_epoch": epoch, **{f"v_{c}": v for c, v in values.items()}}
    return int(db.execute(bump_statement(tuple(values)), params).rowcount)  # type: ignore[attr-defined]


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
    statement = upsert_statement(model, db.get_bind().dialect.name, tuple(rows[0]))
    db.execute(statement, rows)


@functools.cache
def upsert_statement(model: type[Base], dialect: str, columns: tuple[str, ...]) -> Any:
    """The upsert of ``columns`` into ``model``'s table, cached as :func:`bump_statement`
    is (a few shapes per table)."""
    table = cast(Table, model.__table__)
    keys = [c.name for c in table.primary_key.columns]
    # On the table, not the mapped class: a Core executemany, without the ORM's per-row
    # bulk-insert bookkeeping (a fifth less CPU per checkpoint row on SQLite, measured).
    insert = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
    updates = {c: insert.excluded[c] for c in columns if c not in keys}
    return insert.on_conflict_do_update(index_elements=keys, set_=updates)
