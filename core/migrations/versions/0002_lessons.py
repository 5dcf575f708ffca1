"""Reflexion lessons: the lessons, each use of one by a session, and the sessions
that searched them (the comparison group of the measured effect).

A table that exists already is left as it is: a record whose lesson store made its tables
before this revision is adopted. The pgvector column ``lessons.embedding_vec`` is not made
here: it needs the ``vector`` extension, which core/lessons/pgvector.py adds where it is available.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("lessons", "lesson_uses", "lesson_sessions")


def _missing(name: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    if _missing("lessons"):
        op.create_table(
            "lessons",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("trigger", sa.Text(), nullable=False),
            sa.Column("lesson", sa.Text(), nullable=False),
            sa.Column("evidence", sa.Text(), nullable=False),
            sa.Column("goal", sa.Text(), nullable=False),
            sa.Column("toolsets", sa.Text(), nullable=False),
            sa.Column("tools", sa.Text(), nullable=False),
            sa.Column("embedding", sa.Text(), nullable=False),
            sa.Column("text_embedding", sa.Text(), nullable=False),
            sa.Column("embedding_model", sa.String(length=128), nullable=False),
            sa.Column("source_session", sa.String(length=64), nullable=False),
            sa.Column("enabled", sa.Integer(), nullable=False),
            sa.Column("disabled_reason", sa.Text(), nullable=False),
            sa.Column("merged", sa.Integer(), nullable=False),
            sa.Column("uses", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("last_used_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_lessons_source_session", "lessons", ["source_session"], unique=False)
    if _missing("lesson_uses"):
        op.create_table(
            "lesson_uses",
            sa.Column("lesson_id", sa.Integer(), nullable=False),
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("similarity", sa.Float(), nullable=False),
            sa.Column("used_at", sa.Float(), nullable=False),
            sa.Column("outcome", sa.String(length=16), nullable=False),
            sa.PrimaryKeyConstraint("lesson_id", "session_id"),
        )
    if _missing("lesson_sessions"):
        op.create_table(
            "lesson_sessions",
            sa.Column("session_id", sa.String(length=64), nullable=False),
            sa.Column("goal", sa.Text(), nullable=False),
            sa.Column("toolsets", sa.Text(), nullable=False),
            sa.Column("embedding", sa.Text(), nullable=False),
            sa.Column("embedding_model", sa.String(length=128), nullable=False),
            sa.Column("outcome", sa.String(length=16), nullable=False),
            sa.Column("replans", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("session_id"),
        )


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)
