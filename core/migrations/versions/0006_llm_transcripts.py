"""LLM calls keep their prompt and response (masked, cut to llm_transcript_max_chars) for
the console's prompt viewer.

Revision ID: 0006_llm_transcripts
Revises: 0005_auth
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_llm_transcripts"
down_revision: str | Sequence[str] | None = "0005_auth"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("llm_calls")}


def upgrade() -> None:
    present = _columns()
    with op.batch_alter_table("llm_calls") as batch:
        for name in ("prompt", "response"):
            if name not in present:
                batch.add_column(sa.Column(name, sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("response")
        batch.drop_column("prompt")
