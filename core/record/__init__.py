"""The durable record in SQL (SQLite by default, PostgreSQL in production), fenced by epoch.

Every write of an owned session runs in one transaction that first bumps the session row
``WHERE epoch = :epoch``; a stale owner's transaction touches nothing and raises
:class:`FencedOutError`.

``tables`` holds the models, ``engine`` opens a database, ``batches`` the claims and
checkpoints written, ``claims`` and ``statements`` the SQL of those writes, and
``sql_record`` the :class:`SqlRecord` that reads and writes; all are importable from here.
``faults`` tells the store's refusals to wait out (a full disk) from errors.
"""

from __future__ import annotations

from planloop.core.record.batches import Checkpoint, Claim
from planloop.core.record.engine import make_engine
from planloop.core.record.sql_record import SqlRecord
from planloop.core.record.tables import (
    ENDED_STATUSES,
    Base,
    BlobRow,
    DecisionRow,
    EffectRow,
    EventRow,
    LateEffectRow,
    LessonRow,
    LessonSessionRow,
    LessonUseRow,
    LlmCallRow,
    PlanVersionRow,
    SessionRow,
    StepAttemptRow,
)

__all__ = [
    "ENDED_STATUSES",
    "Base",
    "BlobRow",
    "Checkpoint",
    "Claim",
    "DecisionRow",
    "EffectRow",
    "EventRow",
    "LateEffectRow",
    "LessonRow",
    "LessonSessionRow",
    "LessonUseRow",
    "LlmCallRow",
    "PlanVersionRow",
    "SessionRow",
    "SqlRecord",
    "StepAttemptRow",
    "make_engine",
]
