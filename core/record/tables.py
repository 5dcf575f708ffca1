"""The record's tables: sessions, plan versions, step attempts, blobs, events, decisions, LLM
calls, effects and lessons (the models Alembic's migrations in core/migrations/ agree with)."""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# A session in one of these statuses has ended: its row is never claimed or rewritten again.
ENDED_STATUSES = ("completed", "failed", "aborted", "cancelled")


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
    # Lineage: the session and plan version it was forked from, how often it was continued.
    forked_from: Mapped[str] = mapped_column(String(64), default="", server_default="", index=True)
    forked_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    continued: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    report: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Read by the supervisors' look for unfinished sessions, without a scan of every row.
    __table_args__ = (Index("ix_sessions_status_id", "status", "id"),)


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


class LateEffectRow(Base):
    """A write that committed after its attempt's timeout (core/effect_fence.py), recorded
    with its effect, and how it was settled: undone by the session's ending or after it,
    kept (the session keeps its writes), or still waiting for the session to end."""

    __tablename__ = "late_effects"
    idempotency_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(64), default="", index=True)
    step_id: Mapped[str] = mapped_column(String(64), default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    tool: Mapped[str] = mapped_column(String(128), default="")
    committed_at: Mapped[float] = mapped_column(Float, default=0.0)
    # pending | compensated (by the ending, or after it) | kept | failed
    status: Mapped[str] = mapped_column(String(16), default="pending")
    compensation_tool: Mapped[str] = mapped_column(String(128), default="")
    settled_by: Mapped[str] = mapped_column(String(16), default="")  # ending | late
    settled_at: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str] = mapped_column(Text, default="")


class LessonRow(Base):
    """A Reflexion lesson: advice an earlier session left for similar goals.

    ``embedding`` is the vector of ``goal`` (the key lessons are found by) as JSON, empty
    when written without an embeddings endpoint; on PostgreSQL with pgvector a ``vector``
    column beside it mirrors it for the ``<=>`` search (core/lessons/pgvector.py adds it).
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
