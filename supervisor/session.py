"""One session's loop: dispatch ready steps, consume events, decide, checkpoint, acknowledge."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, cast

import redis

from core.errors import (
    FencedOutError,
    HotStateLostError,
    LLMError,
    PlanError,
    SessionEndedError,
    SessionError,
)
from core.models import (
    ErrorKind,
    Event,
    EventType,
    SessionStatus,
    Severity,
    StepState,
    StepStatus,
)
from core.record import Checkpoint
from core.redis_faults import is_redis_fault
from planner.agents import Planner
from planner.plan import Plan, Step
from supervisor.checkpointer import Checkpointer
from supervisor.context import SupervisorContext
from supervisor.ending import adopt_recorded_ending, finish_session
from supervisor.plan_changes import PlanChanges
from supervisor.policy import RuleAction, backoff_s, decide_failure
from supervisor.scheduling import Scheduling
from supervisor.session_base import (
    CANCEL_FIELD,
    FINAL,
    describe_error,
    has_ended,
    read_event,
)
from supervisor.thinking import Deliberation

log = logging.getLogger(__name__)

OUTCOME_STATUS = {
    EventType.TASK_COMPLETED: StepStatus.COMPLETED,
    EventType.TASK_UNEXPECTED_RESULT: StepStatus.COMPLETED,
    EventType.TASK_FAILED: StepStatus.FAILED,
    EventType.TASK_INTERRUPTED: StepStatus.INTERRUPTED,
}
USER_CHANGES = (EventType.NEW_CONSTRAINT, EventType.EXTERNAL_SIGNAL)
IDLE_CLAIM_INTERVAL_S = 2.0


class SessionRunner(Scheduling, PlanChanges):
    """Drives one session this supervisor owns at ``epoch``."""

    def __init__(self, ctx: SupervisorContext, sid: str, epoch: int) -> None:
        super().__init__(ctx, sid, epoch)
        self.brain = Deliberation(self, ctx.chat)
        self.checkpointer = Checkpointer(ctx, sid, epoch)
        self._next_idle_claim = time.monotonic() + IDLE_CLAIM_INTERVAL_S
        self.applying: tuple[str, dict[str, str]] | None = None

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
        try:
            await self._load()
            if self.outcome is None:
                await self._settle_recorded()
            await self._apply(await self._take_over_pending())
            while self.outcome is None:
                await self._check_cancel()  # before anything new is dispatched
                if self.outcome is not None:
                    break
                await self._dispatch_ready()
                await self._announce_approvals()
                # Checkpoint after dispatching, in the background: the next steps never
                # wait on SQL.
                self._checkpoint()
                self.checkpointer.raise_if_failed()
                if self.outcome is not None:
                    break
                entries = await self.store.read_events(
                    self.sid,
                    self.ctx.name,
                    count=self.settings.event_batch,
                    block_ms=self._block_ms(),
                )
                await self._apply(entries)
                await self._reclaim_idle()
                await self._watchdog()
                await self._think()
                self._check_end()
            await finish_session(self, *self.outcome)
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
            await self.checkpointer.close()

    async def _load(self) -> None:
        await self._refuse_ended()
        await self._check_cancel()
        info = await self.store.session(self.sid)
        if info is None:
            raise SessionError("session has no hot state", session_id=self.sid)
        self.info = info
        await self.store.ensure_groups(self.sid)
        started = info.started_at or time.time()
        fields = {
            "status": SessionStatus.RUNNING.value,
            "goal": info.goal,
            "created_at": info.created_at,
            "plan_version": info.plan_version,
            "options": info.options.model_dump_json(),
        }
        raw = await self.store.plan_json(self.sid, info.plan_version) if info.plan_version else None
        if info.plan_version and raw is None:
            # Wiped between the two reads: claiming now would record a session without
            # its plan, which no rebuild could ever restore.
            raise HotStateLostError(self.sid, f"plan version {info.plan_version}")
        try:
            await self.ctx.sql(
                lambda: self.ctx.record.claim(
                    self.sid,
                    self.epoch,
                    owner=self.ctx.name,
                    fields=fields,
                    plan=(info.plan_version, raw) if raw is not None else None,
                )
            )
        except SessionEndedError:
            await adopt_recorded_ending(self)  # its owner died between the SQL and Redis ends
            raise
        await self.store.write(
            self.sid,
            self.epoch,
            [
                (
                    "HSET",
                    self.store.keys.session(self.sid),
                    ["status", "running", "started_at", started],
                )
            ],
        )
        self.info = info.model_copy(update={"started_at": started, "status": SessionStatus.RUNNING})
        self.brain.restore(info.deliberation)
        self.approved = set(info.approved)
        if info.plan_version == 0:
            if self.outcome is None:  # cancelled before planning: nothing ran, nothing to undo
                await self._plan_goal()
        else:
            assert raw is not None  # checked before the claim
            self._use_plan(Plan.model_validate_json(raw))
            if info.started_at:  # taken before: read what happened so far
                self.states = await self.store.steps(self.sid, self.steps)
            for step_id in self.steps:
                self.states.setdefault(step_id, StepState())
            self._reindex()
        log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)

    async def _refuse_ended(self) -> None:
        """Ended is final: an ended session leaves the active set and is not loaded."""
        status = cast(
            str | None, await self.store.r.hget(self.store.keys.session(self.sid), "status")
        )
        if status and SessionStatus(status).ended:
            await self.store.r.srem(self.store.keys.active, self.sid)
            raise SessionEndedError(self.sid, status)

    async def _check_cancel(self) -> None:
        """A cancel asked for in the session hash wins over everything not yet done."""
        if self.outcome is not None:
            return
        key = self.store.keys.session(self.sid)
        reason = cast(str | None, await self.store.r.hget(key, CANCEL_FIELD))
        if reason is not None:
            self.outcome = (SessionStatus.CANCELLED, reason or "cancelled by user")

    async def _plan_goal(self) -> None:
        """A goal without a plan: the LLM planner writes version 1 (recorded, never redone)."""
        if self.ctx.chat is None:
            self.outcome = (
                SessionStatus.FAILED,
                "the session has a goal but no plan, and no LLM is configured",
            )
            return
        tools = (
            self.ctx.tools.subset(self.info.options.tools)
            if self.info.options.tools
            else self.ctx.tools
        )
        planner = Planner(self.ctx.chat, tools, max_repairs=self.settings.plan_max_repairs)
        try:
            plan, usages = await asyncio.to_thread(
                planner.plan, self.info.goal, self.brain.constraints
            )
        except (PlanError, LLMError) as exc:
            self.outcome = (SessionStatus.FAILED, f"planning failed: {exc}")
            return
        self.brain.record_usage(usages)
        await self.install_plan(plan, reason="planned by the LLM planner", replan=False)

    async def _settle_recorded(self) -> None:
        for step_id, st in list(self.states.items()):
            if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note != FINAL:
                await self._decide_failure(step_id)
            elif st.status == StepStatus.COMPLETED:
                self.dirty.add(step_id)  # it may have ended unwatched: its SQL row says running
            elif st.status == StepStatus.RUNNING and not st.started_at:
                # Queued, but perhaps taken by a worker that died before claiming it (the
                # broker would give it back only after its visibility timeout). A second
                # copy costs nothing: the claim runs one.
                await self._resend(step_id)

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

    async def _take_over_pending(self) -> list[tuple[str, dict[str, str]]]:
        """Events a former owner left unacknowledged; poison ones go to the dead letters."""
        entries = await self.store.claim_pending(self.sid, self.ctx.name)
        counts = await self.store.delivery_counts(self.sid, [e for e, _ in entries])
        limit = self.settings.max_deliveries
        dead = [(e, f) for e, f in entries if counts.get(e, 0) > limit]
        if dead:
            log.error(
                "session=%s ALERT: %d event(s) delivered more than %d times moved to %s",
                self.sid,
                len(dead),
                limit,
                self.store.keys.deadletter,
            )
            await self.store.dead_letter(self.sid, dead, cause=f"delivered more than {limit} times")
            await self.store.note_progress(self.sid, "dead_letter", count=len(dead))
            for entry_id, fields in dead:
                with contextlib.suppress(ValueError, KeyError):
                    self.batch.events.append((entry_id, Event.from_fields(fields)))
        return [(e, f) for e, f in entries if counts.get(e, 0) <= limit]

    async def _apply(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        for entry_id, fields in entries:
            self.acks.append(entry_id)
            try:
                event = read_event(fields)
            except (ValueError, KeyError) as exc:
                cause = f"unreadable event: {describe_error(exc)}"
                log.error("session=%s event %s dead-lettered: %s", self.sid, entry_id, cause)
                await self.store.dead_letter(self.sid, [(entry_id, fields)], cause=cause)
                continue
            self.batch.events.append((entry_id, event))
            self.applying = (entry_id, fields)  # named as the cause if the loop crashes
            await self._on_event(event)
            self.applying = None

    async def _on_event(self, event: Event) -> None:
        if event.type in OUTCOME_STATUS:
            await self._on_outcome(event)
            return
        command = event.payload.get("command")
        if command == "cancel":
            self.outcome = (SessionStatus.CANCELLED, event.description or "cancelled by user")
        elif command == "approve" and event.payload.get("step"):
            await self._approve_step(str(event.payload["step"]), event.description)
        elif command == "approve":
            await self.brain.approve(event)
        elif event.payload.get("notice"):
            return  # the supervisor's own notice (no worker consumes): shown, never deliberated
        elif event.type in USER_CHANGES:
            self.brain.note(event)

    async def _approve_step(self, step_id: str, note: str) -> None:
        if step_id not in self.steps or not self.steps[step_id].requires_approval:
            log.info("session=%s approval of %r ignored: no such step waits", self.sid, step_id)
            return
        self.approved.add(step_id)
        self._candidates.add(step_id)
        await self.store.write(
            self.sid,
            self.epoch,
            [("HSET", self.store.keys.session(self.sid), ["approved", sorted(self.approved)])],
        )
        self.states[step_id].note = f"approved{': ' + note if note else ''}"
        await self._write_step(step_id, note=self.states[step_id].note)
        log.info("session=%s step=%s approved by a person", self.sid, step_id)

    async def _announce_approvals(self) -> None:
        """Tell watchers (once per step) that a step waits for `planloop approve --step`."""
        for step_id in sorted(self._awaiting_approval - self._announced - self.approved):
            self._announced.add(step_id)
            self.states[step_id].note = "awaiting approval"
            await self._write_step(step_id, note="awaiting approval")
            await self.store.note_progress(self.sid, "approval_required", step=step_id)
        self._awaiting_approval.clear()

    async def _on_outcome(self, event: Event) -> None:
        st = self.states.get(event.step_id)
        if st is None or st.attempt != event.attempt or st.status != StepStatus.RUNNING:
            return  # an old attempt's outcome, or one already applied
        payload = event.payload
        st.status = OUTCOME_STATUS[event.type]
        st.worker = str(payload.get("worker", st.worker))
        st.started_at = float(payload.get("started_at") or st.started_at)
        st.finished_at = float(payload.get("finished_at") or event.occurred_at)
        st.output_ref = str(payload.get("output_ref", ""))
        st.error_kind = str(payload.get("error_kind", ""))
        st.error = "" if st.status == StepStatus.COMPLETED else event.description
        self.dirty.add(event.step_id)
        if st.status != StepStatus.COMPLETED:
            self.batch.attempts.append(self._attempt_row(event.step_id, st))
        if st.error_kind == ErrorKind.UNAVAILABLE:
            self.down_tools.add(self.steps[event.step_id].tool)
        if st.status != StepStatus.COMPLETED:
            await self._decide_failure(event.step_id)
            return
        self.down_tools.discard(self.steps[event.step_id].tool)
        self._candidates.update(self._dependents.get(event.step_id, ()))
        if event.type == EventType.TASK_UNEXPECTED_RESULT:
            self.brain.note(event)
        await self._check_milestone(self.steps[event.step_id])

    async def _decide_failure(self, step_id: str) -> None:
        """Retry within the step's budget; past it the failure is a context change."""
        step, st = self.steps[step_id], self.states[step_id]
        action = decide_failure(step, st.attempt, st.error_kind, self._max_retries(step))
        if action == RuleAction.RETRY:
            self._candidates.add(step_id)
            self._backing_off.add(step_id)
            st.status = StepStatus.READY
            st.not_before = time.time() + backoff_s(
                st.attempt, self.settings.retry_backoff_s, self.settings.retry_backoff_max_s
            )
            log.info(
                "session=%s step=%s attempt=%d %s: retry",
                self.sid,
                step_id,
                st.attempt,
                st.error_kind,
            )
            await self._write_step(step_id, status=st.status, not_before=st.not_before)
            return
        st.note = FINAL
        if st.status == StepStatus.READY:
            st.status = StepStatus.FAILED
        await self._write_step(step_id, status=st.status, note=FINAL)
        kind = (
            EventType.TASK_INTERRUPTED
            if st.status == StepStatus.INTERRUPTED
            else EventType.TASK_FAILED
        )
        self.brain.note(
            Event(
                type=kind,
                severity=Severity.CRITICAL if step.critical else Severity.WARNING,
                step_id=step_id,
                attempt=st.attempt,
                description=f"{step_id} ({step.tool}) failed for good after "
                f"{st.attempt} attempt(s): {st.error}",
                payload={"error_kind": st.error_kind, "tool": step.tool},
            )
        )

    async def _check_milestone(self, step: Step) -> None:
        phase = step.phase
        if not phase:
            return
        members = [s.id for s in self.plan.steps if s.phase == phase]
        if all(self.states[m].status == StepStatus.COMPLETED for m in members):
            event = Event(
                type=EventType.MILESTONE_REACHED,
                severity=Severity.INFO,
                description=f"phase {phase!r} finished ({len(members)} steps)",
                payload={"phase": phase, "steps": members},
            )
            await self.append_event(event)
            self.brain.note(event)

    async def _think(self) -> None:
        if self.outcome is not None or not self.brain.pending:
            return
        idle = not self._candidates and not self._running()
        await self.brain.maybe_decide(idle=idle)
        await self.store.write(
            self.sid,
            self.epoch,
            [("HSET", self.store.keys.session(self.sid), ["deliberation", self.brain.state()])],
        )

    def _check_end(self) -> None:
        if self.outcome is not None:
            return
        deadline = self.info.options.deadline_s or self.settings.session_deadline_s
        if deadline and time.time() > self.info.started_at + deadline:
            self.outcome = (
                SessionStatus.FAILED,
                f"session deadline of {deadline:g}s passed; partial results kept",
            )
        elif self._candidates or self._running():
            return  # cheap exit while work is obviously left
        elif all(has_ended(s) for s in self.states.values()) and not (
            self.brain.pending or self.brain.awaiting
        ):
            failed = [
                i
                for i, s in self.states.items()
                if s.status in (StepStatus.FAILED, StepStatus.INTERRUPTED)
            ]
            self.outcome = (
                SessionStatus.COMPLETED,
                f"completed around failed steps: {', '.join(failed)}" if failed else "",
            )

    async def checkpoint(self) -> None:
        """Checkpoint what is pending and wait until it is committed and acknowledged."""
        self._checkpoint()
        await self.checkpointer.flush()

    def _checkpoint(self) -> None:
        batch, self.batch = self.batch, Checkpoint()
        dirty, self.dirty = sorted(self.dirty), set()
        acks, self.acks = self.acks, []
        for step_id in dirty:
            st = self.states.get(step_id)
            # READY/PENDING is the step between attempts: the attempt's own row (written
            # when its outcome arrived) already says how it ended.
            if st is not None and st.status not in (StepStatus.READY, StepStatus.PENDING):
                batch.attempts.append(self._attempt_row(step_id, st))
        self.checkpointer.submit(batch, acks)

    def _attempt_row(self, step_id: str, st: StepState) -> dict[str, Any]:
        """An attempt's SQL row; the checkpointer fills in a completed attempt's output."""
        row = st.model_dump(
            include={
                "epoch",
                "worker",
                "dispatched_at",
                "started_at",
                "finished_at",
                "error",
                "error_kind",
                "output_ref",
            }
        )
        return {
            "step_id": step_id,
            "attempt": st.attempt,
            "status": st.status.value,
            **row,
            "output": None,
        }
