"""Lessons carry the tool versions they were learned on: ``lessons.tool_versions``.

A JSON object, tool name -> version (core/lesson_freshness.py). Lessons written before this
revision get ``{}``: learned on no known version, so only their age can make them stale.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _has_column(table: str, column: str) -> bool:
    return column in {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    # A lesson store that made its tables from the models already has the column: adopted.
    if not _has_column("lessons", "tool_versions"):
        op.add_column(
            "lessons",
            sa.Column("tool_versions", sa.Text(), nullable=False, server_default="{}"),
        )


def downgrade() -> None:
    with op.batch_alter_table("lessons") as batch:
        batch.drop_column("tool_versions")
