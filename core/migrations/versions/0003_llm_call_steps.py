"""LLM calls name the agent step and attempt that made them: a worker's ReAct
turns are charged to the session by the worker, as each answer arrives.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("llm_calls")}


def upgrade() -> None:
    present = _columns()
    with op.batch_alter_table("llm_calls") as batch:
        if "step_id" not in present:
            batch.add_column(
                sa.Column("step_id", sa.String(length=64), nullable=False, server_default="")
            )
        if "attempt" not in present:
            batch.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("attempt")
        batch.drop_column("step_id")
