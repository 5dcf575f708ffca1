"""A turn's deciding: deliberate on what changed, record a decision before carrying it out,
and end the session when nothing is left to do (or its deadline passed)."""

from __future__ import annotations

import time

from planloop.core.record.faults import is_store_fault
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.decision_log import record_decision
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.state import SessionState, session_end
from planloop.supervisor.session.verdict import Decision


async def commit_decisions(ctx: SupervisorContext, state: SessionState) -> None:
    """Write the decisions and LLM calls recorded so far to SQL now, fenced by the
    epoch, ahead of the batch the checkpoint writer groups (decision and call rows are
    only ever inserted: no later write undoes them), acknowledging no event. A store that
    refuses them (disk full) leaves them to that batch, which holds them until it recovers."""
    taken = state.take_decisions()
    if not taken:
        return
    try:
        await ctx.sql(lambda: ctx.record.checkpoint(state.sid, state.epoch, taken))
    except Exception as exc:
        if not is_store_fault(exc):
            raise
        batch = state.batch  # ahead of those recorded since; their usage is counted
        batch.decisions = taken.decisions + batch.decisions
        batch.llm_calls = taken.llm_calls + batch.llm_calls
        state.folded_calls += len(taken.llm_calls)


class Decisions:
    """Deliberates, records and carries out one session's decisions."""

    def __init__(
        self,
        ctx: SupervisorContext,
        io: SessionIO,
        deliberation: Deliberation,
        changes: PlanChanges,
    ) -> None:
        self.ctx = ctx
        self.io = io
        self.state = io.state
        self.deliberation = deliberation
        self.changes = changes

    async def carry_out(self, decision: Decision) -> None:
        """Record ``decision`` (with its LLM calls) in SQL, then carry it out: a crash
        while carrying it out loses neither, and the events that caused it, not yet
        acknowledged, reach the next owner, which decides again."""
        record_decision(self.state.batch, self.state.sid, decision)
        await commit_decisions(self.ctx, self.state)
        await self.changes.execute(decision, self.deliberation)

    async def think(self) -> None:
        """Let the trigger policy decide whether to deliberate on what changed, and carry
        out what it decides."""
        state = self.state
        if state.outcome is not None or not self.deliberation.pending:
            return
        idle = not state.candidates and not state.running()
        decision = await self.deliberation.maybe_decide(idle=idle)
        if decision is not None:
            await self.carry_out(decision)
        await self.io.write_session("deliberation", self.deliberation.memory())

    def check_end(self) -> None:
        """End the session when it has nothing left to run or decide, or its deadline
        passed."""
        end = session_end(
            self.state,
            self.ctx.settings.session_deadline_s,
            deliberating=bool(self.deliberation.pending or self.deliberation.awaiting),
            now=time.time(),
        )
        if end is not None:
            self.state.outcome = end
