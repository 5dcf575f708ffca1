"""Sessions keep their lineage: ``forked_from`` and ``forked_version`` (the session and plan
version a fork started from) and ``continued`` (how many times ``planloop continue``
resumed it). Sessions recorded before this revision get "" and 0.

Revision ID: 0007_fork24
Revises: 0006_llm_transcripts
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_fork24"
down_revision: str | Sequence[str] | None = "0006_llm_transcripts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_sessions_forked_from"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    present = {c["name"] for c in inspector.get_columns("sessions")}
    # A record that made its tables from the models already has the columns: adopted.
    with op.batch_alter_table("sessions") as batch:
        if "forked_from" not in present:
            batch.add_column(
                sa.Column("forked_from", sa.String(64), nullable=False, server_default="")
            )
        if "forked_version" not in present:
            batch.add_column(
                sa.Column("forked_version", sa.Integer(), nullable=False, server_default="0")
            )
        if "continued" not in present:
            batch.add_column(
                sa.Column("continued", sa.Integer(), nullable=False, server_default="0")
            )
    if INDEX not in {i["name"] for i in inspector.get_indexes("sessions")}:
        op.create_index(INDEX, "sessions", ["forked_from"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("continued")
        batch.drop_column("forked_version")
        batch.drop_column("forked_from")
