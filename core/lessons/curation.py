"""Curation of the store: a near-duplicate merged into its twin, the least useful evicted."""

from __future__ import annotations

from planloop.core.lessons.columns import vector_of
from planloop.core.lessons.data import LessonStats, NewLesson
from planloop.core.record import LessonRow


def usefulness(s: LessonStats) -> tuple[int, float, float, float]:
    """Sort key, least useful first."""
    rate = s.rate_with if s.rate_with is not None else 0.5  # unproven: in the middle
    return (s.row.enabled, rate, s.row.last_used_at, s.row.created_at)


def centroid(row: LessonRow, new: NewLesson) -> list[float] | None:
    """The mean of the goals' vectors a merged lesson came from (each source goal counted
    once): the key then finds the goals the lesson is about, not the first one's wording.
    None when the vectors are not comparable."""
    old = vector_of(row.embedding)
    if not old or not new.embedding or row.embedding_model != new.embedding_model:
        return None
    if len(old) != len(new.embedding):
        return None
    weight = row.merged  # sources before this one (1 + earlier merges; bumped already)
    mean = [(o * weight + n) / (weight + 1) for o, n in zip(old, new.embedding, strict=True)]
    norm = sum(v * v for v in mean) ** 0.5
    return [v / norm for v in mean] if norm else None


def join_evidence(old: str, new: str) -> str:
    if not new or new in old:
        return old
    joined = f"{old}; {new}" if old else new
    return joined if len(joined) <= 600 else joined[:597] + "..."
