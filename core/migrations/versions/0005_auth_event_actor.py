"""Events name who asked for them: ``events.actor``.

A console user, or the OS user (or ``--as`` name) of a CLI or SDK call; "" for what the
system itself reports. Events recorded before this revision get "".

Revision ID: 0005_auth
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_auth"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _has_column(table: str, column: str) -> bool:
    return column in {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    # A record that made its tables from the models already has the column: adopted.
    if not _has_column("events", "actor"):
        op.add_column(
            "events",
            sa.Column("actor", sa.String(128), nullable=False, server_default=""),
        )


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("actor")
