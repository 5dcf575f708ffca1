"""Late effects: writes that committed after their attempt's timeout, and how each was
settled (``late_effects``). A worker that made the table from the model first (its ledger
creates what it writes to) has it already: adopted.

Revision ID: 0008_late_effects
Revises: 0007_fork24
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_late_effects"
down_revision: str | Sequence[str] | None = "0007_fork24"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_late_effects_session_id"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("late_effects"):
        op.create_table(
            "late_effects",
            sa.Column("idempotency_key", sa.String(255), primary_key=True),
            sa.Column("session_id", sa.String(64), nullable=False),
            sa.Column("step_id", sa.String(64), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("tool", sa.String(128), nullable=False),
            sa.Column("committed_at", sa.Float(), nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("compensation_tool", sa.String(128), nullable=False),
            sa.Column("settled_by", sa.String(16), nullable=False),
            sa.Column("settled_at", sa.Float(), nullable=False),
            sa.Column("error", sa.Text(), nullable=False),
        )
    indexes = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("late_effects")}
    if INDEX not in indexes:
        op.create_index(INDEX, "late_effects", ["session_id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="late_effects")
    op.drop_table("late_effects")
