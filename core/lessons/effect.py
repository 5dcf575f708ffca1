"""A lesson's measured effect: ended sessions that used it against similar ones without it."""

from __future__ import annotations

from collections.abc import Sequence

from planloop.core.lessons.columns import meets, names_of, vector_of
from planloop.core.lessons.data import LessonStats, Thresholds
from planloop.core.record import LessonRow, LessonSessionRow
from planloop.core.similarity import cosine, lexical_similarity

SUCCESS = "completed"


def similar_goal(row: LessonRow, session: LessonSessionRow, limits: Thresholds) -> bool:
    lesson_vec, goal_vec = vector_of(row.embedding), vector_of(session.embedding)
    if lesson_vec and goal_vec and row.embedding_model == session.embedding_model:
        return limits.passes(cosine(lesson_vec, goal_vec), "cosine")
    return limits.passes(lexical_similarity(row.goal or row.lesson, session.goal), "lexical")


def measured_effect(
    row: LessonRow, ended: Sequence[LessonSessionRow], users: set[str], limits: Thresholds
) -> LessonStats:
    toolsets = names_of(row.toolsets)
    with_it = [s for s in ended if s.session_id in users]
    without = [
        s
        for s in ended
        if s.session_id not in users
        and meets(toolsets, names_of(s.toolsets))
        and similar_goal(row, s, limits)
    ]
    return LessonStats(
        row=row,
        used=len(with_it),
        used_ok=sum(s.outcome == SUCCESS for s in with_it),
        without=len(without),
        without_ok=sum(s.outcome == SUCCESS for s in without),
        replans_used=mean_of([s.replans for s in with_it]),
        replans_without=mean_of([s.replans for s in without]),
    )


def mean_of(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0
