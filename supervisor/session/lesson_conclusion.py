"""An ended session's outcome onto its lessons' uses, and a reflection when it went wrong."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from sqlalchemy.exc import SQLAlchemyError

from planloop.core.errors import LLMError
from planloop.core.lesson_freshness import served_versions
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.lesson_story import ended_session
from planloop.supervisor.session.lessons import BAD_ENDINGS
from planloop.supervisor.session.rounds import Rounds
from planloop.supervisor.session.state import SessionState

log = logging.getLogger(__name__)


async def conclude_lessons(
    ctx: SupervisorContext, state: SessionState, deliberation: Deliberation, rounds: Rounds
) -> None:
    """Run after the end is recorded: a reflection never delays or changes the end."""
    lessons, sid = ctx.lessons, state.sid
    if lessons is None or state.outcome is None:
        return
    searched = deliberation.lessons is not None
    wrong = state.outcome[0] in BAD_ENDINGS or state.info.replans or rounds.critic_failed
    if not searched and not wrong:
        return  # never searched and nothing to learn: no row to write
    ended = replace(
        ended_session(state, deliberation, rounds.critic_failed),
        tool_versions=served_versions(ctx.tools.specs()),
    )
    spent = deliberation.llm_budget_spent()
    if spent is not None:  # the outcome is still recorded; no reflection past the budget
        log.info("session=%s no reflection: %s", sid, spent)
        lessons = lessons.without_reflection()
    try:
        written, _ = await asyncio.to_thread(lessons.conclude, ended, ended.story.goal)
    except (SQLAlchemyError, LLMError) as exc:
        log.warning("session=%s lessons not concluded: %s", sid, exc)
        return
    if written:
        log.info("session=%s reflection wrote lesson(s) %s", sid, written)
