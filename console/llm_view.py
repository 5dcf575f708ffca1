"""The session's LLM calls for the console: role, model, tokens, cost, latency and, for the
roles allowed to read them, the prompt and the response the record kept (masked, cut)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planloop.config.settings import Settings
from planloop.console.guard import ROLE_KEY
from planloop.console.users import Role
from planloop.core.llm_budget import cost_usd
from planloop.core.record import SqlRecord

# Who may read prompts and responses: they can quote a tool's output or a user's goal.
TRANSCRIPT_ROLE = Role.OPERATOR


def may_read_transcripts(scope: Mapping[str, Any]) -> bool:
    """Whether the request's user may read prompts and responses: an operator or an admin.
    The auth middleware (console/guard.py) sets ``planloop.role`` on every request it lets
    through; a request without one is refused, never taken for an admin's."""
    try:
        role = Role(str(scope.get(ROLE_KEY)))
    except ValueError:  # no role, or one this console does not know
        return False
    return role.allows(TRANSCRIPT_ROLE)


def llm_calls(record: SqlRecord, sid: str, settings: Settings) -> list[dict[str, Any]]:
    """Every recorded call of ``sid``, oldest first, priced by the settings' table."""
    return [
        {
            "id": row.id,
            "at": row.created_at,
            "role": row.role,
            "model": row.model,
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "cost_usd": round(
                cost_usd(row.model, row.prompt_tokens, row.completion_tokens, settings.llm_prices),
                6,
            ),
            "latency_s": round(row.latency_s, 3),
            "step_id": row.step_id,
            "attempt": row.attempt,
            "has_transcript": row.prompt is not None or row.response is not None,
        }
        for row in record.llm_calls(sid)
    ]


def transcript_of(record: SqlRecord, sid: str, call_id: int) -> dict[str, Any] | None:
    """The kept prompt and response of call ``call_id`` of ``sid`` (None: no such call)."""
    for row in record.llm_calls(sid):
        if row.id == call_id:
            return {"id": row.id, "role": row.role, "prompt": row.prompt, "response": row.response}
    return None
