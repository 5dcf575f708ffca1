"""Searching the lessons for a session's goal, on a thread: the advice its prompts get."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.exc import SQLAlchemyError

from planloop.core.lesson_freshness import served_versions
from planloop.core.tools import ToolRegistry
from planloop.supervisor.session.lessons import LessonMemory, advice
from planloop.supervisor.session.state import SessionState

log = logging.getLogger(__name__)


async def search_lessons(
    lessons: LessonMemory, tools: ToolRegistry, state: SessionState
) -> list[str]:
    """Advice for this session's goal (searched once; see Deliberation.advice)."""
    info = state.info
    usable = tools.subset(info.options.tools) if info.options.tools else tools
    goal = info.goal or (state.plan.goal if state.steps else "")
    try:
        # Staleness is against every tool this supervisor knows, not only the session's.
        served = served_versions(tools.specs())
        found = await asyncio.to_thread(lessons.retrieve, state.sid, goal, usable.names(), served)
    except SQLAlchemyError as exc:
        log.warning("session=%s lessons not searched: %s", state.sid, exc)
        return []
    return advice(found)
