"""One session's loop: dispatch ready steps, consume events, decide, checkpoint, acknowledge."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import redis
from sqlalchemy.exc import SQLAlchemyError

from planloop.core.errors import (
    FencedOutError,
    HotStateLostError,
    LLMError,
    SessionEndedError,
)
from planloop.core.lesson_freshness import served_versions
from planloop.core.llm_meter import METER
from planloop.core.models import (
    ErrorKind,
    Event,
    EventType,
    SessionStatus,
    Severity,
    StepStatus,
)
from planloop.core.redis_faults import is_redis_fault
from planloop.core.step_commands import StepCommand, step_command_refusal
from planloop.core.tracing import SESSION
from planloop.planner.plan import Step
from planloop.planner.react import usages_of
from planloop.supervisor.io.checkpointer import Checkpointer
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.store_port import Entry, SessionStorePort
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.process.no_consumer_watch import ConsumerMonitor
from planloop.supervisor.session.agent_undo import AgentEffect, agent_effects, late_writes
from planloop.supervisor.session.broken import dependency_broken
from planloop.supervisor.session.cancel_watch import CancelWatch
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.decision_log import record_decision, record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ending import Ending
from planloop.supervisor.session.failures import settle_failure
from planloop.supervisor.session.finish import finish_session
from planloop.supervisor.session.lesson_search import search_lessons
from planloop.supervisor.session.lesson_story import ended_session
from planloop.supervisor.session.lessons import BAD_ENDINGS
from planloop.supervisor.session.llm_usage import LLMUsage
from planloop.supervisor.session.plan_goal import announce_fallback, plan_goal
from planloop.supervisor.session.ports import SessionIO, describe_error, read_event
from planloop.supervisor.session.rounds import Rounds
from planloop.supervisor.session.schedule import wait_ms
from planloop.supervisor.session.sending import Scheduling
from planloop.supervisor.session.start import SessionStart, StartPorts
from planloop.supervisor.session.state import SessionState, attempt_row, session_end
from planloop.supervisor.session.streaming import StreamedPlanning, StreamPorts
from planloop.supervisor.session.usage_ledger import (
    count_reported,
    session_meter,
)
from planloop.supervisor.session.verdict import Decision

log = logging.getLogger(__name__)

OUTCOME_STATUS = {
    EventType.TASK_COMPLETED: StepStatus.COMPLETED,
    EventType.TASK_UNEXPECTED_RESULT: StepStatus.COMPLETED,
    EventType.TASK_FAILED: StepStatus.FAILED,
    EventType.TASK_INTERRUPTED: StepStatus.INTERRUPTED,
}
USER_CHANGES = (EventType.NEW_CONSTRAINT, EventType.EXTERNAL_SIGNAL)
IDLE_CLAIM_INTERVAL_S = 2.0


class SessionRunner:
    """Drives one session this supervisor owns at ``epoch``.

    The loop owns the :class:`SessionState`; its collaborators get narrow ports: the
    scheduler (session/schedule.py) says what to dispatch, Scheduling sends it, the deliberation
    returns a decision the loop records and PlanChanges carries out, and ending gets an
    :class:`Ending`.
    """

    def __init__(
        self, ctx: SupervisorContext, sid: str, epoch: int, taken: Taken | None = None
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.store: SessionStorePort = ctx.store  # the loop needs the port, nothing more
        self.state = SessionState(sid, epoch)
        self.io = SessionIO(
            self.state,
            ctx.store,
            ctx.settings,
            ctx.tools,
            consumer=ctx.name,
            stored_outputs=self._stored_outputs,
            events=ctx.events,
        )
        self.changes = PlanChanges(self.io, ctx.dispatcher.revoke, self._commit_decisions)
        self.deliberation = Deliberation(
            self.state,
            ctx.settings,
            ctx.chat,
            ctx.tools,
            ctx.dispatcher.sensitive,
            self.io.load_outputs,
            fetch_lessons=(
                None
                if ctx.lessons is None
                else functools.partial(search_lessons, ctx.lessons, ctx.tools, self.state)
            ),
        )
        consumers = ConsumerMonitor(
            ctx.store,
            sid,
            ctx.settings,
            self.io.append_event,
            queue_of=lambda step_id: self.state.states[step_id].queue,
        )
        self.scheduling = Scheduling(
            self.io, ctx.dispatcher, on_failure=self._decide_failure, consumers=consumers
        )
        # The ending's checkpoints join the next commit round: a thousand sessions ending
        # together are one commit, not a thousand hurried ones.
        self.ending = Ending(
            self.io,
            self.changes,
            ctx.dispatcher,
            ctx.dispatcher.sensitive,
            self._checkpoint_in_round,
            self._agent_effects,
            self._late_writes,
        )
        self.rounds = Rounds(self.io, self.changes, self.deliberation)
        self.checkpointer = Checkpointer(ctx, sid, epoch)
        self.cancel = CancelWatch(ctx.store, self.state)
        self.usage = LLMUsage(self.io, self.deliberation, self._carry_out)
        self.start = SessionStart(
            ctx,
            self.io,
            taken,
            self.scheduling,
            self.deliberation,
            self.cancel,
            StartPorts(
                apply=self._apply,
                decide_failure=self._decide_failure,
                usage=self.usage,
                plan_goal=lambda: plan_goal(
                    ctx, self.io, self.deliberation, self.rounds, self._streamed()
                ),
                streamed=self._streamed,
            ),
        )
        self._next_idle_claim = time.monotonic() + IDLE_CLAIM_INTERVAL_S
        self.applying: tuple[str, dict[str, str]] | None = None

    @property
    def sid(self) -> str:
        return self.state.sid

    def _streamed(self) -> StreamedPlanning:
        """A streamed first plan's planning, with what it uses of this loop while the plan
        arrives."""
        ports = StreamPorts(
            self.ctx,
            self.io,
            self.changes,
            self.scheduling,
            apply=self._apply,
            checkpoint=self._checkpoint,
            announce_fallback=functools.partial(announce_fallback, self.io),
        )
        return StreamedPlanning(ports)

    @property
    def epoch(self) -> int:
        return self.state.epoch

    # --- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """Drive the session to its end, or until another supervisor fences us out.

        1. Refuse a session that has ended (ended is final); note a cancel asked for before
           anything else is loaded. Load the plan version and step states (planning the
           goal first if there is no plan yet, unless cancelled); record the takeover in SQL.
        2. Settle outcomes recorded while nobody watched; re-send attempts never started.
        3. Take over events a former owner left unacknowledged and apply them.
        4. Until the session has an outcome: dispatch ready steps, checkpoint to SQL and
           acknowledge, wait for events or the next timer, apply the events, run the
           watchdog, and let the trigger policy decide whether to deliberate.
        5. Stop what runs, compensate if aborted or cancelled, write the report.
        """
        SESSION.set(self.sid)  # this task's LLM spans belong to the session's trace
        if self.ctx.record is not None:  # every LLM call of this task is charged as it arrives
            METER.set(session_meter(self.state, self.settings, self.ctx.record))
        state = self.state
        try:
            await self.start.run()
            while state.outcome is None:
                await self.cancel.check()  # before anything new is dispatched
                if state.outcome is not None:
                    break
                await self.scheduling.dispatch_ready()
                await self._announce_approvals()
                await self.start.started()
                # Checkpoint after dispatching, in the background: the next steps never
                # wait on SQL.
                self._checkpoint()
                self.checkpointer.raise_if_failed()
                if state.outcome is not None:
                    break
                entries = await self._wait_for_events()
                await self.ctx.admission.defer()  # sessions starting go first
                await self._apply(entries)
                await self._reclaim_idle()
                await self.scheduling.watchdog()
                await self._think()
                await self.usage.check()
                self._check_end()
                await self.rounds.review()  # with an LLM, a completed round is judged
            await self._finish(*state.outcome)
        except SessionEndedError as exc:
            log.info("session=%s epoch=%d not taken: %s", self.sid, self.epoch, exc)
        except FencedOutError:
            log.warning(
                "session=%s epoch=%d fenced out: another supervisor owns it", self.sid, self.epoch
            )
        except HotStateLostError as exc:
            log.warning("session=%s epoch=%d loop stopped: %s", self.sid, self.epoch, exc)
        except redis.RedisError as exc:
            if not is_redis_fault(exc):
                raise
            # Not the session's fault: no crash counted. It is taken again (a new epoch)
            # through the reclaim path once Redis answers, or rebuilt from SQL if Redis
            # lost it.
            log.warning(
                "session=%s epoch=%d loop stopped by a redis fault (%s: %s); taken again "
                "when redis answers",
                self.sid,
                self.epoch,
                type(exc).__name__,
                exc,
            )
        finally:
            await self.start.close()
            await self.checkpointer.close()

    async def _wait_for_events(self) -> list[Entry]:
        """The session's next events: wait until one arrives or the next timer is due."""
        return await self.io.read_events(
            count=self.settings.event_batch, block_ms=wait_ms(self.state, time.time())
        )

    async def _finish(self, status: SessionStatus, reason: str) -> None:
        """Stop what runs, compensate, answer, write the report, then reflect (lessons)."""
        await self.start.started()
        await self.ctx.admission.defer()

        async def conclude(compensations: list[dict[str, Any]]) -> dict[str, Any]:
            return await self.rounds.conclusion(status, reason, compensations)

        await finish_session(self.ending, status, reason, conclude=conclude)
        await self._conclude_lessons()

    async def _agent_effects(self) -> list[AgentEffect]:
        """The writes agent steps made, from the effect ledger's SQL rows (to undo them)."""
        rows = await self.ctx.sql(lambda: self.ctx.record.effects(self.sid))
        return agent_effects(self.sid, rows)

    async def _late_writes(
        self, steps: Sequence[tuple[Step, str]]
    ) -> list[tuple[Step, AgentEffect]]:
        """Plan-step writes that committed after their attempt timed out (to undo them)."""
        rows = await self.ctx.sql(lambda: self.ctx.record.effects(self.sid))
        return late_writes(self.sid, rows, steps)

    async def _stored_outputs(self, sid: str, refs: list[str]) -> dict[str, str]:
        return await self.ctx.sql(lambda: self.ctx.record.outputs(sid, refs))

    async def _conclude_lessons(self) -> None:
        """The ended session's outcome onto its lessons' uses, and a reflection when it went
        wrong (after the end is recorded: a reflection never delays or changes the end)."""
        lessons, state = self.ctx.lessons, self.state
        if lessons is None or state.outcome is None:
            return
        searched = self.deliberation.lessons is not None
        wrong = state.outcome[0] in BAD_ENDINGS or state.info.replans or self.rounds.critic_failed
        if not searched and not wrong:
            return  # never searched and nothing to learn: no row to write
        ended = replace(
            ended_session(self.state, self.deliberation, self.rounds.critic_failed),
            tool_versions=served_versions(self.ctx.tools.specs()),
        )
        spent = self.deliberation.llm_budget_spent()
        if spent is not None:  # the outcome is still recorded; no reflection past the budget
            log.info("session=%s no reflection: %s", self.sid, spent)
            lessons = lessons.without_reflection()
        try:
            written, _ = await asyncio.to_thread(lessons.conclude, ended, ended.story.goal)
        except (SQLAlchemyError, LLMError) as exc:
            log.warning("session=%s lessons not concluded: %s", self.sid, exc)
            return
        if written:
            log.info("session=%s reflection wrote lesson(s) %s", self.sid, written)

    async def _reclaim_idle(self) -> None:
        """Take events stuck in another consumer's pending list (a former owner that woke
        up and read them before it noticed it had lost the lease)."""
        now = time.monotonic()
        if now < self._next_idle_claim:
            return
        self._next_idle_claim = now + IDLE_CLAIM_INTERVAL_S
        idle_ms = int(IDLE_CLAIM_INTERVAL_S * 1000)
        await self._apply(
            await self.store.claim_pending(self.sid, self.ctx.name, min_idle_ms=idle_ms)
        )

    async def _apply(self, entries: list[Entry]) -> None:
        for entry_id, fields in entries:
            self.state.acks.append(entry_id)
            try:
                event = read_event(fields)
            except (ValueError, KeyError) as exc:
                cause = f"unreadable event: {describe_error(exc)}"
                log.error("session=%s event %s dead-lettered: %s", self.sid, entry_id, cause)
                await self.store.dead_letter(self.sid, [(entry_id, fields)], cause=cause)
                continue
            self.state.batch.events.append((entry_id, event))
            self.applying = (entry_id, fields)  # named as the cause if the loop crashes
            await self._on_event(event)
            self.applying = None

    async def _on_event(self, event: Event) -> None:
        if event.type in OUTCOME_STATUS:
            await self._on_outcome(event)
            return
        command = event.payload.get("command")
        if command == "cancel":
            self.state.outcome = (SessionStatus.CANCELLED, event.description or "cancelled by user")
        elif command == "approve" and event.payload.get("step"):
            await self._approve_step(str(event.payload["step"]), event.description, event.actor)
        elif command == "approve":
            await self._approve(event)
        elif command in ("retry", "skip"):
            await self._step_command(StepCommand(command), str(event.payload.get("step")), event)
        elif event.payload.get("notice"):
            return  # the supervisor's own notice (no worker consumes): shown, never deliberated
        elif event.type in USER_CHANGES:
            self.deliberation.note(event)

    async def _approve_step(self, step_id: str, note: str, actor: str = "") -> None:
        state = self.state
        refusal = self._refusal(StepCommand.APPROVE, step_id)
        if refusal:  # the producer checked, but the step may have moved on since
            log.info("session=%s approval of %r ignored: %s", self.sid, step_id, refusal)
            return
        state.approved.add(step_id)
        state.candidates.add(step_id)
        await self.io.write_session("approved", sorted(state.approved))
        st = state.states[step_id]
        st.note = f"approved by {actor or 'a person'}{': ' + note if note else ''}"
        st.requested_by = actor
        await self.io.write_step(step_id, note=st.note, requested_by=actor)
        log.info("session=%s step=%s %s", self.sid, step_id, st.note)

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
        refusal = self._refusal(command, step_id)
        if refusal:
            log.info("session=%s %s of %r ignored: %s", self.sid, command, step_id, refusal)
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
        log.info("session=%s step=%s %s", self.sid, step_id, by)

    async def _approve(self, event: Event) -> None:
        """A person chose what to do about the changes parked for them."""
        decision = self.deliberation.approve(event)
        if decision is None:
            return
        await self.io.write_session("awaiting", "")
        await self._carry_out(decision)

    async def _carry_out(self, decision: Decision) -> None:
        """Record ``decision`` (with its LLM calls) in SQL, then carry it out: a crash
        while carrying it out loses neither, and the events that caused it, not yet
        acknowledged, reach the next owner, which decides again."""
        record_decision(self.state.batch, self.sid, decision)
        await self._commit_decisions()
        await self.changes.execute(decision, self.deliberation)

    async def _commit_decisions(self) -> None:
        """Write the decisions and LLM calls recorded so far to SQL now, fenced by the
        epoch, ahead of the batch the checkpoint writer groups (decision and call rows are
        only ever inserted: no later write undoes them), acknowledging no event."""
        taken = self.state.take_decisions()
        if taken:
            await self.ctx.sql(lambda: self.ctx.record.checkpoint(self.sid, self.epoch, taken))

    async def _announce_approvals(self) -> None:
        """Tell watchers (once per step) that a step waits for `planloop approve --step`."""
        state = self.state
        for step_id in sorted(state.awaiting_approval - state.announced - state.approved):
            state.announced.add(step_id)
            state.states[step_id].note = "awaiting approval"
            await self.io.write_step(step_id, note="awaiting approval")
            await self.store.note_progress(self.sid, "approval_required", step=step_id)
        state.awaiting_approval.clear()

    async def _on_outcome(self, event: Event) -> None:
        state = self.state
        st = state.states.get(event.step_id)
        if st is None or st.attempt != event.attempt or st.status != StepStatus.RUNNING:
            return  # an old attempt's outcome, or one already applied
        payload = event.payload
        reported = usages_of(payload.get("llm_usage"))  # an agent step's calls
        count_reported(state, reported)  # charged by its worker as they arrived
        record_usage(state.batch, reported)  # a worker without a ledger: recorded here
        st.status = OUTCOME_STATUS[event.type]
        st.worker = str(payload.get("worker", st.worker))
        st.started_at = float(payload.get("started_at") or st.started_at)
        st.finished_at = float(payload.get("finished_at") or event.occurred_at)
        st.output_ref = str(payload.get("output_ref", ""))
        st.error_kind = str(payload.get("error_kind", ""))
        st.error = "" if st.status == StepStatus.COMPLETED else event.description
        state.dirty.add(event.step_id)
        if st.status != StepStatus.COMPLETED:
            state.batch.attempts.append(attempt_row(event.step_id, st))
        if st.error_kind == ErrorKind.UNAVAILABLE:
            state.down_tools.add(state.steps[event.step_id].tool)
        if st.status != StepStatus.COMPLETED:
            await self._decide_failure(event.step_id)
            return
        state.down_tools.discard(state.steps[event.step_id].tool)
        state.candidates.update(state.dependents.get(event.step_id, ()))
        if event.type == EventType.TASK_UNEXPECTED_RESULT:
            self.deliberation.note(event)
        await self._check_milestone(state.steps[event.step_id])

    async def _decide_failure(self, step_id: str) -> None:
        """Retry within the step's budget; past it the failure is a context change."""
        state, settings = self.state, self.settings
        settled = settle_failure(
            state,
            step_id,
            max_retries=self.io.max_retries(state.steps[step_id]),
            backoff_base_s=settings.retry_backoff_s,
            backoff_max_s=settings.retry_backoff_max_s,
            now=time.time(),
            store_retry_interval_s=settings.store_retry_interval_s,
            store_retry_limit=settings.store_retry_limit,
        )
        if settled.retry:
            st = state.states[step_id]
            log.info(
                "session=%s step=%s attempt=%d %s: retry",
                self.sid,
                step_id,
                st.attempt,
                st.error_kind,
            )
        await self.io.write_step(step_id, **settled.fields)
        if settled.final is not None:
            self.deliberation.note(settled.final)
            await self._raise_broken(step_id)

    async def _raise_broken(self, step_id: str) -> None:
        """With an LLM, a final failure that breaks critical work (or an unresolvable
        reference) is a CRITICAL DEPENDENCY_BROKEN the decision agent sees before any branch
        is skipped; the rule policy keeps skipping the branch and saying so afterwards."""
        if self.deliberation.chat is None:
            return
        unresolved = step_id in self.scheduling.unresolved
        event = dependency_broken(self.state, step_id, unresolved=unresolved)
        if event is None:
            return
        await self.io.append_event(event)
        self.deliberation.note(event)

    async def _check_milestone(self, step: Step) -> None:
        phase, state = step.phase, self.state
        if not phase:
            return
        members = [s.id for s in state.plan.steps if s.phase == phase]
        if all(state.states[m].status == StepStatus.COMPLETED for m in members):
            event = Event(
                type=EventType.MILESTONE_REACHED,
                severity=Severity.INFO,
                description=f"phase {phase!r} finished ({len(members)} steps)",
                payload={"phase": phase, "steps": members},
            )
            await self.io.append_event(event)
            if self.deliberation.reviews_milestones:
                # Noted only for a review: a change nothing will decide about would hold
                # the session open (it ends when nothing is left to decide).
                self.deliberation.note(event)

    async def _think(self) -> None:
        state = self.state
        if state.outcome is not None or not self.deliberation.pending:
            return
        idle = not state.candidates and not state.running()
        decision = await self.deliberation.maybe_decide(idle=idle)
        if decision is not None:
            await self._carry_out(decision)
        await self.io.write_session("deliberation", self.deliberation.memory())

    def _check_end(self) -> None:
        end = session_end(
            self.state,
            self.settings.session_deadline_s,
            deliberating=bool(self.deliberation.pending or self.deliberation.awaiting),
            now=time.time(),
        )
        if end is not None:
            self.state.outcome = end

    async def checkpoint(self) -> None:
        """Checkpoint what is pending and wait until it is committed and acknowledged."""
        self._checkpoint()
        await self.checkpointer.flush()

    async def _checkpoint_in_round(self) -> None:
        """:meth:`checkpoint`, committed with whatever round it joins (no hurry)."""
        self._checkpoint()
        await self.checkpointer.flush(hurry=False)

    def _checkpoint(self) -> None:
        self.checkpointer.submit(*self.state.take_checkpoint())
