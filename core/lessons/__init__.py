"""The lessons store (Reflexion): lessons, their uses and the sessions that searched them.

Tables (core/record/tables.py, same metadata as the rest of the record): ``lessons``,
``lesson_uses`` (lesson x session, with the session's outcome once it ends) and
``lesson_sessions`` (every session that searched, used a lesson or not: the comparison
group).

Search, best first among enabled lessons whose toolsets meet the session's and that are
not stale (core/lesson_freshness.py: a tool they were learned on changed, or too old):

1. PostgreSQL with the ``vector`` extension: ``embedding_vec <=> :query`` (cosine distance)
   in SQL, on a ``vector`` column this module adds beside the JSON one;
2. otherwise cosine over the candidates' JSON vectors in Python (numpy);
3. a lesson without a vector of the query's model, or a query without a vector, is scored
   by :func:`lexical_similarity` against its own (lower) threshold.

Curation: a new lesson whose text is a near-duplicate of an enabled one (similarity at or
above the duplicate threshold) is merged into it; past ``max_lessons`` the least useful go.

``store`` holds :class:`LessonStore`; ``data`` what it takes and returns; ``columns``,
``effect``, ``curation`` and ``pgvector`` the pieces above. All are importable from here.
"""

from __future__ import annotations

from planloop.core.lessons.columns import staleness, toolsets_of
from planloop.core.lessons.data import Found, LessonStats, NewLesson, Query, Thresholds
from planloop.core.lessons.effect import SUCCESS
from planloop.core.lessons.pgvector import VECTOR_COLUMN
from planloop.core.lessons.store import LessonStore

__all__ = [
    "SUCCESS",
    "VECTOR_COLUMN",
    "Found",
    "LessonStats",
    "LessonStore",
    "NewLesson",
    "Query",
    "Thresholds",
    "staleness",
    "toolsets_of",
]
