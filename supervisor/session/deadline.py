"""Time left before a session's deadline, checked before each LLM call: a call that may run
past the deadline is not started, and the rule policy decides instead."""

from __future__ import annotations

from planloop.config.settings import Settings
from planloop.supervisor.session.state import SessionState

DEADLINE_NEAR = "deadline_near"  # the notice (stream) and progress kind that says so


def time_left_s(state: SessionState, settings: Settings, now: float) -> float | None:
    """Seconds before the session's deadline, or None when it has none."""
    deadline = state.info.options.deadline_s or settings.session_deadline_s
    if not deadline or not state.info.started_at:
        return None
    return state.info.started_at + deadline - now


def short_of_time(state: SessionState, settings: Settings, now: float) -> str:
    """Why the session cannot afford an LLM call now (less time left than one call may
    take, ``llm_timeout_s``), or "" when it can."""
    left = time_left_s(state, settings, now)
    if left is None or left >= settings.llm_timeout_s:
        return ""
    return (
        f"{max(left, 0.0):.0f}s left before the session deadline, less than one LLM call "
        f"may take ({settings.llm_timeout_s:g}s): no LLM call, the rule policy decides"
    )
