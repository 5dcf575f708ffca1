"""The record as ``create_all`` made it before migrations: sessions, plan versions, step
attempts, blobs, events, decisions, LLM calls, effects.

A table that exists already is left as it is, so a record made by ``create_all`` (or a
worker's ``effects`` table made before the first upgrade) is adopted, not recreated.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "sessions",
    "plan_versions",
    "step_attempts",
    "blobs",
    "events",
    "decisions",
    "llm_calls",
    "effects",
)


def _missing(name: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    if _missing("sessions"):
        op.create_table(
            "sessions",
            sa.Column("id", sa.String(length=64), nullable=False),
            sa.Column("status", sa.String(length=16), nullable=False),
            sa.Column("goal", sa.Text(), nullable=False),
            sa.Column("epoch", sa.Integer(), nullable=False),
            sa.Column("owner", sa.String(length=128), nullable=False),
            sa.Column("plan_version", sa.Integer(), nullable=False),
            sa.Column("replans", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("updated_at", sa.Float(), nullable=False),
            sa.Column("finished_at", sa.Float(), nullable=False),
            sa.Column("error", sa.Text(), nullable=False),
            sa.Column("options", sa.Text(), nullable=False),
            sa.Column("report", sa.Text(), nullable=True),
            sa.PrimaryKeyConstraint("id"),
        )
    if _missing("plan_versions"):
        op.create_table(
            "plan_versions",
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("plan", sa.Text(), nullable=False),
            sa.Column("reason", sa.Text(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("session_id", "version"),
        )
    if _missing("step_attempts"):
        op.create_table(
            "step_attempts",
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("step_id", sa.String(length=64), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("status", sa.String(length=16), nullable=False),
            sa.Column("epoch", sa.Integer(), nullable=False),
            sa.Column("worker", sa.String(length=255), nullable=False),
            sa.Column("dispatched_at", sa.Float(), nullable=False),
            sa.Column("started_at", sa.Float(), nullable=False),
            sa.Column("finished_at", sa.Float(), nullable=False),
            sa.Column("error", sa.Text(), nullable=False),
            sa.Column("error_kind", sa.String(length=16), nullable=False),
            sa.Column("output_ref", sa.String(length=64), nullable=False),
            sa.Column("output", sa.Text(), nullable=True),
            sa.PrimaryKeyConstraint("session_id", "step_id", "attempt"),
        )
    if _missing("blobs"):
        op.create_table(
            "blobs",
            sa.Column("digest", sa.String(length=64), nullable=False),
            sa.Column("data", sa.Text(), nullable=False),
            sa.Column("size", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("digest"),
        )
    if _missing("events"):
        op.create_table(
            "events",
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("event_id", sa.String(length=32), nullable=False),
            sa.Column("type", sa.String(length=32), nullable=False),
            sa.Column("severity", sa.String(length=16), nullable=False),
            sa.Column("step_id", sa.String(length=64), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("description", sa.Text(), nullable=False),
            sa.Column("payload", sa.Text(), nullable=False),
            sa.Column("occurred_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("session_id", "event_id"),
        )
    if _missing("decisions"):
        op.create_table(
            "decisions",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("epoch", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("action", sa.String(length=32), nullable=False),
            sa.Column("source", sa.String(length=16), nullable=False),
            sa.Column("reasoning", sa.Text(), nullable=False),
            sa.Column("payload", sa.Text(), nullable=False),
            sa.Column("prompt_tokens", sa.Integer(), nullable=False),
            sa.Column("completion_tokens", sa.Integer(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_decisions_session_id", "decisions", ["session_id"], unique=False)
    if _missing("llm_calls"):
        op.create_table(
            "llm_calls",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("role", sa.String(length=32), nullable=False),
            sa.Column("model", sa.String(length=128), nullable=False),
            sa.Column("prompt_tokens", sa.Integer(), nullable=False),
            sa.Column("completion_tokens", sa.Integer(), nullable=False),
            sa.Column("latency_s", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_llm_calls_session_id", "llm_calls", ["session_id"], unique=False)
    if _missing("effects"):
        op.create_table(
            "effects",
            sa.Column("idempotency_key", sa.String(length=255), nullable=False),
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("step_id", sa.String(length=64), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("tool", sa.String(length=128), nullable=False),
            sa.Column("receipt", sa.Text(), nullable=True),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("idempotency_key"),
        )
        op.create_index("ix_effects_session_id", "effects", ["session_id"], unique=False)


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)
