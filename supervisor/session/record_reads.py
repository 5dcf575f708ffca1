"""What a session's loop reads from the SQL record: agent steps' effects, and stored outputs."""

from __future__ import annotations

from collections.abc import Sequence

from planloop.planner.plan import Step
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.agent_undo import AgentEffect, agent_effects, late_writes


async def effects_to_undo(ctx: SupervisorContext, sid: str) -> list[AgentEffect]:
    """The writes agent steps made, from the effect ledger's SQL rows (to undo them)."""
    rows = await ctx.sql(lambda: ctx.record.effects(sid))
    return agent_effects(sid, rows)


async def late_writes_to_undo(
    ctx: SupervisorContext, sid: str, steps: Sequence[tuple[Step, str]]
) -> list[tuple[Step, AgentEffect]]:
    """Plan-step writes that committed after their attempt timed out (to undo them)."""
    rows = await ctx.sql(lambda: ctx.record.effects(sid))
    return late_writes(sid, rows, steps)


async def stored_outputs(ctx: SupervisorContext, sid: str, refs: list[str]) -> dict[str, str]:
    """Step outputs kept in SQL, by reference."""
    return await ctx.sql(lambda: ctx.record.outputs(sid, refs))
