"""Claiming a session in the SQL record: this epoch owns it, with the plan version it runs."""

from __future__ import annotations

from planloop.core.models import SessionStatus
from planloop.core.record import Claim
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.carried import lineage_fields
from planloop.supervisor.session.state import SessionState


async def claim_session(
    ctx: SupervisorContext, state: SessionState, plan: tuple[int, str] | None
) -> None:
    """Record in SQL that ``state``'s epoch owns the session (grouped with other claims)."""
    info = state.info
    fields = {
        "status": SessionStatus.RUNNING.value,
        "goal": info.goal,
        "created_at": info.created_at,
        "plan_version": info.plan_version,
        "options": info.options.model_dump_json(),
        **lineage_fields(info),
    }
    await ctx.claims.claim(Claim(state.sid, state.epoch, ctx.name, fields, plan))
