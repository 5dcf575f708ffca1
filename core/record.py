"""The durable record in SQL (SQLite by default, PostgreSQL in production), fenced by epoch.

Every write of an owned session runs in one transaction that first bumps the session row
``WHERE epoch = :epoch``; a stale owner's transaction touches nothing and raises
:class:`FencedOutError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    Float,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    create_engine,
    event,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from planloop.core.errors import FencedOutError, SessionEndedError, SessionError
from planloop.core.llm_budget import UsageByModel
from planloop.core.models import Event

if TYPE_CHECKING:
    from planloop.core.llm_meter import Charge

# A session in one of these statuses has ended: its row is never claimed or rewritten again.
ENDED_STATUSES = ("completed", "failed", "aborted", "cancelled")
CLAIM_CHUNK = 500  # sessions per query of a grouped claim (bound parameters per statement)


class Base(DeclarativeBase):
    """Declarative base of the record's tables."""


class SessionRow(Base):
    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    goal: Mapped[str] = mapped_column(Text, default="")
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str] = mapped_column(String(128), default="")
    plan_version: Mapped[int] = mapped_column(Integer, default=1)
    replans: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    updated_at: Mapped[float] = mapped_column(Float, default=0.0)
    finished_at: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str] = mapped_column(Text, default="")
    options: Mapped[str] = mapped_column(Text, default="{}")
    report: Mapped[str | None] = mapped_column(Text, nullable=True)


class PlanVersionRow(Base):
    __tablename__ = "plan_versions"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class StepAttemptRow(Base):
    __tablename__ = "step_attempts"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    step_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str] = mapped_column(String(255), default="")
    dispatched_at: Mapped[float] = mapped_column(Float, default=0.0)
    started_at: Mapped[float] = mapped_column(Float, default=0.0)
    finished_at: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str] = mapped_column(Text, default="")
    error_kind: Mapped[str] = mapped_column(String(16), default="")
    output_ref: Mapped[str] = mapped_column(String(64), default="")
    # Records written before the blobs table kept the output here; new rows leave it NULL.
    output: Mapped[str | None] = mapped_column(Text, nullable=True)


class BlobRow(Base):
    """A step output by content address (sha256 of its JSON), stored once whichever attempt
    or session made it: the durable copy of ``pl:blob:{digest}``, which expires in Redis."""

    __tablename__ = "blobs"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class EventRow(Base):
    __tablename__ = "events"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    severity: Mapped[str] = mapped_column(String(16))
    step_id: Mapped[str] = mapped_column(String(64), default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    description: Mapped[str] = mapped_column(Text, default="")
    payload: Mapped[str] = mapped_column(Text, default="{}")
    occurred_at: Mapped[float] = mapped_column(Float, default=0.0)
    actor: Mapped[str] = mapped_column(String(128), default="", server_default="")


class DecisionRow(Base):
    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(64), index=True)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    action: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(String(16), default="rule")
    reasoning: Mapped[str] = mapped_column(Text, default="")
    payload: Mapped[str] = mapped_column(Text, default="{}")
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)


class LlmCallRow(Base):
    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    role: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(128), default="")
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    # An agent step's turns (charged by the worker that ran them) name the step and attempt.
    step_id: Mapped[str] = mapped_column(String(64), default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # The call's prompt and response, masked and cut (core/llm_transcript.py); NULL: not kept.
    prompt: Mapped[str | None] = mapped_column(Text, nullable=True)
    response: Mapped[str | None] = mapped_column(Text, nullable=True)


class EffectRow(Base):
    """One effect of a write tool, by idempotency key: the durable side of the effect ledger
    (:mod:`core.effects`). The primary key decides which attempt's receipt wins."""

    __tablename__ = "effects"
    idempotency_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(64), default="", index=True)
    step_id: Mapped[str] = mapped_column(String(64), default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    tool: Mapped[str] = mapped_column(String(128), default="")
    receipt: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON; set before commit
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class LessonRow(Base):
    """A Reflexion lesson: advice an earlier session left for similar goals.

    ``embedding`` is the vector of ``goal`` (the key lessons are found by) as JSON, empty
    when written without an embeddings endpoint; on PostgreSQL with pgvector a ``vector``
    column beside it mirrors it for the ``<=>`` search (core/lessons.py adds it).
    """

    __tablename__ = "lessons"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trigger: Mapped[str] = mapped_column(Text, default="")
    lesson: Mapped[str] = mapped_column(Text)
    evidence: Mapped[str] = mapped_column(Text, default="")
    goal: Mapped[str] = mapped_column(Text, default="")  # the source session's goal
    toolsets: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of prefixes
    tools: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of tool names
    # JSON object tool name -> version (core/lesson_freshness.py) it was learned on
    tool_versions: Mapped[str] = mapped_column(Text, default="{}")
    embedding: Mapped[str] = mapped_column(Text, default="")  # JSON list of floats
    text_embedding: Mapped[str] = mapped_column(Text, default="")  # of the lesson itself
    embedding_model: Mapped[str] = mapped_column(String(128), default="")
    source_session: Mapped[str] = mapped_column(String(64), default="", index=True)
    enabled: Mapped[int] = mapped_column(Integer, default=1)
    disabled_reason: Mapped[str] = mapped_column(Text, default="")
    merged: Mapped[int] = mapped_column(Integer, default=0)  # near-duplicates folded in
    uses: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    last_used_at: Mapped[float] = mapped_column(Float, default=0.0)


class LessonUseRow(Base):
    """One lesson given to one session's prompts, with the session's outcome once it ends."""

    __tablename__ = "lesson_uses"
    lesson_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    similarity: Mapped[float] = mapped_column(Float, default=0.0)
    used_at: Mapped[float] = mapped_column(Float, default=0.0)
    outcome: Mapped[str] = mapped_column(String(16), default="")  # "" while it runs


class LessonSessionRow(Base):
    """A session that searched the lessons (used some or none): the comparison group that
    tells whether sessions with a lesson do better than similar ones without it."""

    __tablename__ = "lesson_sessions"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    goal: Mapped[str] = mapped_column(Text, default="")
    toolsets: Mapped[str] = mapped_column(Text, default="[]")
    embedding: Mapped[str] = mapped_column(Text, default="")
    embedding_model: Mapped[str] = mapped_column(String(128), default="")
    outcome: Mapped[str] = mapped_column(String(16), default="")
    replans: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


@dataclass(frozen=True)
class Claim:
    """A supervisor taking a session at ``epoch`` (see :meth:`SqlRecord.claim`)."""

    sid: str
    epoch: int
    owner: str
    fields: dict[str, Any]
    plan: tuple[int, str] | None = None


@dataclass
class Checkpoint:
    """What one batch of applied events changed, written in one fenced transaction."""

    session: dict[str, Any] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, Event]] = field(default_factory=list)
    plan_versions: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)  # digest -> JSON, inserted once

    def __bool__(self) -> bool:
        return bool(
            self.blobs
            or self.session
            or self.attempts
            or self.events
            or self.plan_versions
            or self.decisions
            or self.llm_calls
        )


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
        connect_args={"timeout": 30} if is_sqlite else {},
    )
    if engine.dialect.name == "postgresql":
        # PostgreSQL text cannot hold NUL; a goal or an error carrying one must not wedge
        # the session at its claim (DataError forever): NUL becomes U+FFFD, visibly.
        @event.listens_for(engine, "before_cursor_execute", retval=True)
        def _no_nul(
            _conn: Any, _cursor: Any, statement: str, params: Any, _context: Any, _many: bool
        ) -> tuple[str, Any]:
            return statement, _without_nul(params)

    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _pragmas(conn: Any, _record: Any) -> None:
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    return engine


class SqlRecord:
    """Reads and fenced writes of the durable record."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def from_url(cls, url: str, *, auto_migrate: bool = True) -> SqlRecord:
        """The record at ``url``, its schema upgraded (``auto_migrate``) or checked.

        Raises:
            SchemaBehindError: not ``auto_migrate`` and the schema is behind.
        """
        record = cls(make_engine(url))
        try:
            record.ensure_schema(auto_migrate=auto_migrate)
        except BaseException:
            record.engine.dispose()  # a refused record keeps no connection open
            raise
        return record

    def ensure_schema(self, *, auto_migrate: bool = True) -> None:
        """Upgrade the schema to the newest migration, or check that it is there."""
        from planloop.core.migrate import prepare  # Alembic: only where a record is opened

        prepare(self.engine, auto_migrate=auto_migrate)

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        with self._sessions.begin() as db:
            yield db

    # --- ownership ------------------------------------------------------------------------
    def claim(
        self,
        sid: str,
        epoch: int,
        *,
        owner: str,
        fields: dict[str, Any],
        plan: tuple[int, str] | None = None,
    ) -> None:
        """Record that ``owner`` took the session at ``epoch`` (creating the row if new).

        ``plan`` (version, JSON) is the version the owner runs; it is stored if the record
        lacks it (version 1 of a new session, or one whose owner died before recording it).
        """
        error = self.claim_many([Claim(sid, epoch, owner, fields, plan)])[0]
        if error is not None:
            raise error

    def claim_many(self, claims: Sequence[Claim]) -> list[SessionError | None]:
        """:meth:`claim` for many sessions in one transaction (one commit, one fsync).

        Returns, per claim, the error that refused it (ended, or fenced out) or None; a
        refused claim writes nothing.
        """
        with self._tx() as db:
            return _claim_many(db, claims)

    # --- fenced writes --------------------------------------------------------------------
    def checkpoint(self, sid: str, epoch: int, batch: Checkpoint) -> None:
        """Write ``batch`` in one transaction, only while ``epoch`` is the session's epoch."""
        if sid in self.checkpoint_many([(sid, epoch, batch)]):
            raise FencedOutError(sid, epoch)

    def checkpoint_many(self, batches: Sequence[tuple[str, int, Checkpoint]]) -> set[str]:
        """Write the ``(sid, epoch, batch)`` of many sessions in one transaction.

        Each session's row is bumped ``WHERE epoch = :epoch`` first; a session fenced out (or
        ended) gets nothing written and is returned. The rows of the others are upserted
        together, one statement per table: one commit for a whole supervisor's turn.
        """
        fenced: set[str] = set()
        # On the table, not the mapped class: a Core UPDATE, without the ORM's bulk-update
        # bookkeeping (synchronising the session) per row of a thousand sessions.
        sessions = cast(Table, SessionRow.__table__)
        with self._tx() as db:
            kept: list[tuple[str, int, Checkpoint]] = []
            for sid, epoch, batch in batches:
                if not batch:
                    continue
                values = {"updated_at": time.time(), **batch.session}
                bumped = db.execute(
                    update(sessions)
                    .where(
                        sessions.c.id == sid,
                        sessions.c.epoch == epoch,
                        sessions.c.status.notin_(ENDED_STATUSES),  # ended is written once
                    )
                    .values(**values)
                )
                if bumped.rowcount != 1:  # type: ignore[attr-defined]
                    fenced.add(sid)
                else:
                    kept.append((sid, epoch, batch))
            blobs = {d: text for _, _, b in kept for d, text in b.blobs.items()}
            _insert_new(db, BlobRow, [_blob_values(d, text) for d, text in blobs.items()])
            plans = [{"session_id": sid, **v} for sid, _, b in kept for v in b.plan_versions]
            _upsert(db, PlanVersionRow, plans)
            attempts: dict[tuple[str, str, int], dict[str, Any]] = {}
            for sid, _, batch in kept:
                for a in batch.attempts:  # the last row of an attempt wins
                    attempts[(sid, a["step_id"], a["attempt"])] = {"session_id": sid, **a}
            _upsert(db, StepAttemptRow, list(attempts.values()))
            events = {(sid, i): ev for sid, _, b in kept for i, ev in b.events}
            _upsert(db, EventRow, [_event_values(sid, i, ev) for (sid, i), ev in events.items()])
            for sid, epoch, batch in kept:
                for decision in batch.decisions:
                    db.add(DecisionRow(session_id=sid, epoch=epoch, **decision))
                for call in batch.llm_calls:
                    db.add(LlmCallRow(session_id=sid, **call))
        return fenced

    def add_events(self, sid: str, events: Sequence[tuple[str, Event]]) -> None:
        """Record ``events`` (id, event) that no checkpoint carried (rebuilt after a loss)."""
        with self._tx() as db:
            _upsert(db, EventRow, [_event_values(sid, i, ev) for i, ev in events])

    def fail_unrecoverable(self, sid: str, error: str) -> bool:
        """End a session whose hot state is gone and cannot be rebuilt (failed, with
        ``error``); False if it had ended already (ended is written once)."""
        now = time.time()
        with self._tx() as db:
            ended = db.execute(
                update(SessionRow)
                .where(SessionRow.id == sid, SessionRow.status.notin_(ENDED_STATUSES))
                .values(status="failed", error=error, finished_at=now, updated_at=now)
            )
            return bool(ended.rowcount)  # type: ignore[attr-defined]

    # --- reads ----------------------------------------------------------------------------
    def session(self, sid: str) -> SessionRow | None:
        with self._sessions() as db:
            return db.get(SessionRow, sid)

    def plan_versions(self, sid: str) -> Sequence[PlanVersionRow]:
        with self._sessions() as db:
            query = select(PlanVersionRow).where(PlanVersionRow.session_id == sid)
            return db.scalars(query.order_by(PlanVersionRow.version)).all()

    def attempts(self, sid: str) -> Sequence[StepAttemptRow]:
        with self._sessions() as db:
            query = select(StepAttemptRow).where(StepAttemptRow.session_id == sid)
            return db.scalars(query.order_by(StepAttemptRow.step_id, StepAttemptRow.attempt)).all()

    def outputs(self, sid: str, refs: Sequence[str]) -> dict[str, str]:
        """Stored outputs (JSON) by content address: the durable copy of what Redis expires.

        Read from the blobs table, then, for what it lacks, from the attempt rows of ``sid``
        (a record written before the table existed).
        """
        wanted = set(refs)
        if not wanted:
            return {}
        with self._sessions() as db:
            query = select(BlobRow.digest, BlobRow.data).where(BlobRow.digest.in_(wanted))
            found: dict[str, str] = {digest: data for digest, data in db.execute(query)}
            if wanted - found.keys():
                legacy = select(StepAttemptRow.output_ref, StepAttemptRow.output).where(
                    StepAttemptRow.session_id == sid,
                    StepAttemptRow.output_ref.in_(wanted - found.keys()),
                    StepAttemptRow.output.is_not(None),
                )
                found.update({ref: out for ref, out in db.execute(legacy) if out is not None})
            return found

    def events(self, sid: str) -> Sequence[EventRow]:
        with self._sessions() as db:
            query = select(EventRow).where(EventRow.session_id == sid)
            return db.scalars(query.order_by(EventRow.occurred_at, EventRow.event_id)).all()

    def decisions(self, sid: str) -> Sequence[DecisionRow]:
        with self._sessions() as db:
            query = select(DecisionRow).where(DecisionRow.session_id == sid)
            return db.scalars(query.order_by(DecisionRow.id)).all()

    def unfinished(self) -> list[str]:
        """Sessions the record says are not over (for rebuilding lost hot state)."""
        with self._sessions() as db:
            query = select(SessionRow.id).where(SessionRow.status.in_(("pending", "running")))
            return list(db.scalars(query).all())

    def effects(self, sid: str) -> Sequence[EffectRow]:
        """The write effects the ledger recorded for ``sid`` (with a receipt), oldest first."""
        with self._sessions() as db:
            query = select(EffectRow).where(
                EffectRow.session_id == sid, EffectRow.receipt.is_not(None)
            )
            return db.scalars(query.order_by(EffectRow.created_at)).all()

    def llm_calls(self, sid: str) -> Sequence[LlmCallRow]:
        with self._sessions() as db:
            query = select(LlmCallRow).where(LlmCallRow.session_id == sid)
            return db.scalars(query.order_by(LlmCallRow.id)).all()

    # --- the LLM call ledger (core/llm_meter.py) ------------------------------------------
    def record_llm_call(self, charge: Charge) -> None:
        """Write one LLM call of ``charge.session_id`` now, in its own transaction.

        Not fenced and not refused for an ended session: the tokens were spent whoever
        asked, and the totals must equal what the endpoint served.
        """
        with self._tx() as db:
            db.add(LlmCallRow(session_id=charge.session_id, **charge.row()))

    def usage_of(self, sid: str) -> UsageByModel:
        """Every recorded LLM call of ``sid`` as tokens per model (``{model: [p, c]}``)."""
        query = (
            select(
                LlmCallRow.model,
                func.sum(LlmCallRow.prompt_tokens),
                func.sum(LlmCallRow.completion_tokens),
            )
            .where(LlmCallRow.session_id == sid)
            .group_by(LlmCallRow.model)
        )
        with self._sessions() as db:
            return {str(m): [int(p or 0), int(c or 0)] for m, p, c in db.execute(query)}


def _without_nul(value: Any) -> Any:
    """``value`` (statement parameters) with every NUL in a string replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {k: _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_without_nul(v) for v in value)
    return value


def _event_values(sid: str, event_id: str, ev: Event) -> dict[str, Any]:
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


def _blob_values(digest: str, text: str) -> dict[str, Any]:
    return {"digest": digest, "data": text, "size": len(text), "created_at": time.time()}


def _insert_new(db: Session, model: type[Base], rows: list[dict[str, Any]]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING (SQLite and PostgreSQL): a row by content address
    that is there already is the same row."""
    if not rows:
        return
    table = cast(Table, model.__table__)
    insert = (
        pg_insert(table) if db.get_bind().dialect.name == "postgresql" else sqlite_insert(table)
    )
    db.execute(insert.on_conflict_do_nothing(), rows)


def _claim_many(db: Session, claims: Sequence[Claim]) -> list[SessionError | None]:
    """The claims inside one transaction, in order: each refused (nothing written for it)
    when its session has ended or a newer epoch holds it.

    Set-based: the rows the claims touch are read (and locked, on PostgreSQL) in one query
    per ``CLAIM_CHUNK`` sessions and written with one statement per table. A thousand
    sessions starting together were two ORM look-ups and an ORM insert each, the
    supervisor's biggest CPU cost of a burst, paid under the GIL its event loop needs.
    """
    sessions = cast(Table, SessionRow.__table__)
    plan_versions = cast(Table, PlanVersionRow.__table__)
    sids = sorted({claim.sid for claim in claims})
    current: dict[str, tuple[str, int]] = {}  # sid -> (status, epoch), as the claims go
    plans: set[tuple[str, int]] = set()
    for start in range(0, len(sids), CLAIM_CHUNK):
        chunk = sids[start : start + CLAIM_CHUNK]
        found = db.execute(
            select(sessions.c.id, sessions.c.status, sessions.c.epoch)
            .where(sessions.c.id.in_(chunk))
            .with_for_update()
        )
        current.update({sid: (status, epoch) for sid, status, epoch in found})
        stored = db.execute(
            select(plan_versions.c.session_id, plan_versions.c.version).where(
                plan_versions.c.session_id.in_(chunk)
            )
        )
        plans.update((sid, version) for sid, version in stored)
    results: list[SessionError | None] = []
    created: dict[str, dict[str, Any]] = {}
    bumped: dict[str, dict[str, Any]] = {}
    new_plans: list[dict[str, Any]] = []
    for claim in claims:
        sid, epoch, now = claim.sid, claim.epoch, time.time()
        row = current.get(sid)
        if row is not None and row[0] in ENDED_STATUSES:
            results.append(SessionEndedError(sid, row[0]))
            continue
        if row is not None and row[1] >= epoch:
            results.append(FencedOutError(sid, epoch))
            continue
        plan = claim.plan
        if plan is not None and (sid, plan[0]) not in plans:
            plans.add((sid, plan[0]))
            reason = "submitted" if plan[0] == 1 else "restored on takeover"
            new_plans.append(
                {
                    "session_id": sid,
                    "version": plan[0],
                    "plan": plan[1],
                    "reason": reason,
                    "created_at": now,
                }
            )
        owned = {"epoch": epoch, "owner": claim.owner, "updated_at": now}
        if row is None:
            created[sid] = {"id": sid, **owned, **claim.fields}
            status = str(claim.fields.get("status", ""))
        elif sid in created:  # created by an earlier claim of this batch
            created[sid].update(owned)
            status = row[0]
        else:
            bumped[sid] = owned
            status = row[0]
        current[sid] = (status, epoch)
        results.append(None)
    if new_plans:
        db.execute(plan_versions.insert(), new_plans)
    # One INSERT per set of columns (executemany needs the same columns in every row).
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for values in created.values():
        by_columns.setdefault(tuple(sorted(values)), []).append(values)
    for rows in by_columns.values():
        db.execute(sessions.insert(), rows)
    if bumped:
        db.execute(
            update(sessions)
            .where(sessions.c.id == bindparam("claimed_id"))
            .values(
                epoch=bindparam("claimed_epoch"),
                owner=bindparam("claimed_owner"),
                updated_at=bindparam("claimed_at"),
            ),
            [
                {
                    "claimed_id": sid,
                    "claimed_epoch": v["epoch"],
                    "claimed_owner": v["owner"],
                    "claimed_at": v["updated_at"],
                }
                for sid, v in bumped.items()
            ],
        )
    return results


def _upsert(db: Session, model: type[Base], rows: list[dict[str, Any]]) -> None:
    """INSERT ... ON CONFLICT DO UPDATE for many rows (SQLite and PostgreSQL).

    One statement executed with many parameter sets: compiled once and cached, and
    batched by SQLAlchemy's insertmanyvalues.
    """
    if not rows:
        return
    table = cast(Table, model.__table__)
    keys = [c.name for c in table.primary_key.columns]
    dialect = db.get_bind().dialect.name
    # On the table, not the mapped class: a Core executemany, without the ORM's per-row
    # bulk-insert bookkeeping (a fifth less CPU per checkpoint row on SQLite, measured).
    insert = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
    updates = {c: insert.excluded[c] for c in rows[0] if c not in keys}
    db.execute(insert.on_conflict_do_update(index_elements=keys, set_=updates), rows)
