"""An index on the sessions' status and id: the supervisors' look for unfinished sessions
(every few seconds, to rebuild what Redis lost) reads it instead of every session row ever
recorded, whose reports and options make a full scan grow with the record's history.

Revision ID: 0009_unfinished_index
Revises: 0008_late_effects
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_unfinished_index"
down_revision: str | Sequence[str] | None = "0008_late_effects"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_sessions_status_id"


def upgrade() -> None:
    indexes = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("sessions")}
    if INDEX not in indexes:
        op.create_index(INDEX, "sessions", ["status", "id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="sessions")
