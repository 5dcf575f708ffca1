"""A person's commands to a running session: cancel, approve (a step, or parked changes),
retry or skip a step; and the notices that a step waits for an approval."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from planloop.core.models import Event, SessionStatus, StepStatus
from planloop.core.step_commands import StepCommand, step_command_refusal
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.verdict import Decision

log = logging.getLogger(__name__)


class Commands:
    """Carries out the commands found on one session's event stream."""

    def __init__(
        self,
        io: SessionIO,
        changes: PlanChanges,
        deliberation: Deliberation,
        carry_out: Callable[[Decision], Awaitable[None]],
    ) -> None:
        self.io = io
        self.state = io.state
        self.changes = changes
        self.deliberation = deliberation
        self.carry_out = carry_out

    async def apply(self, event: Event) -> bool:
        """Carry out the command ``event`` carries; False when it carries none."""
        command = event.payload.get("command")
        if command == "cancel":
            self.state.outcome = (SessionStatus.CANCELLED, event.description or "cancelled by user")
        elif command == "approve" and event.payload.get("step"):
            await self._approve_step(str(event.payload["step"]), event.description, event.actor)
        elif command == "approve":
            await self._approve(event)
        elif command in ("retry", "skip"):
            await self._step_command(StepCommand(command), str(event.payload.get("step")), event)
        else:
            return False
        return True

    async def announce_approvals(self) -> None:
        """Tell watchers (once per step) that a step waits for `planloop approve --step`."""
        state = self.state
        for step_id in sorted(state.awaiting_approval - state.announced - state.approved):
            state.announced.add(step_id)
            state.states[step_id].note = "awaiting approval"
            await self.io.write_step(step_id, note="awaiting approval")
            await self.io.store.note_progress(state.sid, "approval_required", step=step_id)
        state.awaiting_approval.clear()

    async def _approve_step(self, step_id: str, note: str, actor: str = "") -> None:
        state = self.state
        refusal = self._refusal(StepCommand.APPROVE, step_id)
        if refusal:  # the producer checked, but the step may have moved on since
            log.info("session=%s approval of %r ignored: %s", state.sid, step_id, refusal)
            return
        state.approved.add(step_id)
        state.candidates.add(step_id)
        await self.io.write_session("approved", sorted(state.approved))
        st = state.states[step_id]
        st.note = f"approved by {actor or 'a person'}{': ' + note if note else ''}"
        st.requested_by = actor
        await self.io.write_step(step_id, note=st.note, requested_by=actor)
        log.info("session=%s step=%s %s", state.sid, step_id, st.note)

    def _refusal(self, command: StepCommand, step_id: str) -> str | None:
        """Why ``command`` does not apply to the step now (core/step_commands.py, the rule
        the producer applied before sending it), or None."""
        st, step = self.state.states.get(step_id), self.state.steps.get(step_id)
        return step_command_refusal(
            command,
            st.status if st is not None else None,
            requires_approval=bool(step and step.requires_approval),
            approved=step_id in self.state.approved,
        )

    async def _step_command(self, command: StepCommand, step_id: str, event: Event) -> None:
        """A person retries a step that failed for good, or skips one that failed or has
        not started (an approval rejected); ignored (and logged) where it does not apply:
        the producer refused it then, but the step may have moved on since."""
        sid = self.state.sid
        refusal = self._refusal(command, step_id)
        if refusal:
            log.info("session=%s %s of %r ignored: %s", sid, command, step_id, refusal)
            return
        st = self.state.states[step_id]
        by = f"{command} by {event.actor or 'a person'}"
        by += f": {event.description}" if event.description else ""
        if command == StepCommand.SKIP:
            st.status, st.note = StepStatus.SKIPPED, by
            self.state.candidates.discard(step_id)
            self.state.dirty.add(step_id)
            await self.io.write_step(step_id, status=st.status, note=st.note)
            await self.changes.skip_descendants(step_id)
        else:
            st.requested_by = event.actor
            await self.changes.retry_step(step_id, by)
            await self.io.write_step(step_id, requested_by=event.actor)
        log.info("session=%s step=%s %s", sid, step_id, by)

    async def _approve(self, event: Event) -> None:
        """A person chose what to do about the changes parked for them."""
        decision = self.deliberation.approve(event)
        if decision is None:
            return
        await self.io.write_session("awaiting", "")
        await self.carry_out(decision)
