"""One session's loop: dispatch ready steps, consume events, decide, checkpoint, acknowledge."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from core.errors import FencedOutError, LLMError, PlanError, SessionError
from core.models import (
    ErrorKind,
    Event,
    EventType,
    SessionRecord,
    SessionStatus,
    Severity,
    StepState,
    StepStatus,
    StepTaskArgs,
)
from core.record import Checkpoint
from planner.agents import Planner
from planner.dag import descendants
from planner.plan import Plan, Step
from planner.references import find_references, resolve_params
from supervisor.checkpointer import Checkpointer
from supervisor.context import SupervisorContext
from supervisor.ending import finish_session
from supervisor.policy import RuleAction, backoff_s, decide_failure
from supervisor.thinking import Deliberation

log = logging.getLogger(__name__)

FINAL = "final"
OUTCOME_STATUS = {
    EventType.TASK_COMPLETED: StepStatus.COMPLETED,
    EventType.TASK_UNEXPECTED_RESULT: StepStatus.COMPLETED,
    EventType.TASK_FAILED: StepStatus.FAILED,
    EventType.TASK_INTERRUPTED: StepStatus.INTERRUPTED,
}
USER_CHANGES = (EventType.NEW_CONSTRAINT, EventType.EXTERNAL_SIGNAL)
IDLE_CLAIM_INTERVAL_S = 2.0


def has_ended(st: StepState) -> bool:
    """True when nothing more will happen to the step in this plan version."""
    if st.status in (StepStatus.COMPLETED, StepStatus.SKIPPED, StepStatus.CANCELLED):
        return True
    return st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note == FINAL


class SessionRunner:
    """Drives one session this supervisor owns at ``epoch``."""

    def __init__(self, ctx: SupervisorContext, sid: str, epoch: int) -> None:
        self.ctx = ctx
        self.sid = sid
        self.epoch = epoch
        self.store = ctx.store
        self.settings = ctx.settings
        self.info = SessionRecord(id=sid)
        self.plan = Plan(steps=[Step(id="_", tool="_")])
        self.steps: dict[str, Step] = {}
        self.states: dict[str, StepState] = {}
        self.outputs: dict[str, Any] = {}
        self.down_tools: set[str] = set()
        self.batch = Checkpoint()
        self.dirty: set[str] = set()
        self.acks: list[str] = []
        self.outcome: tuple[SessionStatus, str] | None = None
        self.brain = Deliberation(self, ctx.chat)
        self.checkpointer = Checkpointer(ctx, sid, epoch)
        # Scheduling indexes, so one loop turn costs what changed, not the plan's size.
        self._order: dict[str, int] = {}
        self._dependents: dict[str, list[str]] = {}
        self._candidates: set[str] = set()  # may be dispatchable; re-checked on use
        self._inflight: set[str] = set()  # dispatched by us; pruned lazily
        self._next_idle_claim = time.monotonic() + IDLE_CLAIM_INTERVAL_S

    # --- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """Drive the session to its end, or until another supervisor fences us out.

        1. Load the plan version and step states (planning the goal first if there is no
           plan yet); record the takeover in SQL.
        2. Settle outcomes recorded while nobody watched; re-send attempts never started.
        3. Take over events a former owner left unacknowledged and apply them.
        4. Until the session has an outcome: dispatch ready steps, checkpoint to SQL and
           acknowledge, wait for events or the next timer, apply the events, run the
           watchdog, and let the trigger policy decide whether to deliberate.
        5. Stop what runs, compensate if aborted or cancelled, write the report.
        """
        try:
            await self._load()
            await self._settle_recorded()
            await self._apply(await self._take_over_pending())
            while self.outcome is None:
                await self._dispatch_ready()
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
        except FencedOutError:
            log.warning(
                "session=%s epoch=%d fenced out: another supervisor owns it", self.sid, self.epoch
            )
        finally:
            await self.checkpointer.close()

    # --- 1. load --------------------------------------------------------------------------
    async def _load(self) -> None:
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
        await self.ctx.sql(
            lambda: self.ctx.record.claim(self.sid, self.epoch, owner=self.ctx.name, fields=fields)
        )
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
        if info.plan_version == 0:
            await self._plan_goal()
        else:
            raw = await self.store.plan_json(self.sid, info.plan_version)
            if raw is None:
                raise SessionError(
                    f"plan version {info.plan_version} is missing", session_id=self.sid
                )
            self._use_plan(Plan.model_validate_json(raw))
            self.states = await self.store.steps(self.sid, self.steps)
            for step_id in self.steps:
                self.states.setdefault(step_id, StepState())
            self._reindex()
            self.batch.plan_versions.append(
                {
                    "version": info.plan_version,
                    "plan": raw,
                    "reason": "submitted",
                    "created_at": time.time(),
                }
            )
        log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)

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
        finally:
            self.plan = Plan(goal=self.info.goal, steps=[Step(id="_", tool="_")])
        self.brain.record_usage(usages)
        await self.install_plan(plan, reason="planned by the LLM planner", replan=False)

    def _use_plan(self, plan: Plan) -> None:
        self.plan = plan
        self.steps = {s.id: s for s in plan.steps}
        self._order = {s.id: i for i, s in enumerate(plan.steps)}
        self._dependents = {s.id: [] for s in plan.steps}
        for step in plan.steps:
            for dep in step.dependencies:
                self._dependents.setdefault(dep, []).append(step.id)

    def _reindex(self) -> None:
        """Rebuild the scheduling indexes from the step states (after load or re-plan)."""
        open_ = (StepStatus.PENDING, StepStatus.READY)
        self._candidates = {i for i, st in self.states.items() if st.status in open_}
        self._inflight = {i for i, st in self.states.items() if st.status == StepStatus.RUNNING}

    def _running(self) -> int:
        self._inflight = {
            i
            for i in self._inflight
            if i in self.states and self.states[i].status == StepStatus.RUNNING
        }
        return len(self._inflight)

    # --- 2. settle what happened while nobody watched --------------------------------------
    async def _settle_recorded(self) -> None:
        for step_id, st in list(self.states.items()):
            if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note != FINAL:
                await self._decide_failure(step_id)
            elif st.status == StepStatus.COMPLETED:
                self.dirty.add(step_id)  # it may have ended unwatched: its SQL row says running
            elif st.status == StepStatus.RUNNING and not st.started_at:
                # Dispatched but maybe never queued (we died in between).
                await self._resend(step_id)

    async def _resend(self, step_id: str) -> None:
        """Send a dispatched, never started attempt again under the same task id.

        The copy carries the epoch the step hash was dispatched at, so the worker's claim
        matches; whichever delivery claims first runs, any other is dropped as a duplicate.
        """
        st = self.states[step_id]
        args = self._task_args(step_id, st.attempt, await self._params(step_id))
        self.ctx.dispatcher.send(args.model_copy(update={"epoch": st.epoch}))
        st.dispatched_at = time.time()
        await self._write_step(step_id, dispatched_at=st.dispatched_at)

    # --- 3/4. events ----------------------------------------------------------------------
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
            await self.store.dead_letter(self.sid, dead)
            await self.store.note_progress(self.sid, "dead_letter", count=len(dead))
            for entry_id, fields in dead:
                with contextlib.suppress(ValueError, KeyError):
                    self.batch.events.append((entry_id, Event.from_fields(fields)))
        return [(e, f) for e, f in entries if counts.get(e, 0) <= limit]

    async def _apply(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        for entry_id, fields in entries:
            self.acks.append(entry_id)
            try:
                event = Event.from_fields(fields)
            except (ValueError, KeyError) as exc:
                log.error("session=%s event %s unreadable, dropped: %s", self.sid, entry_id, exc)
                continue
            self.batch.events.append((entry_id, event))
            await self._on_event(event)

    async def _on_event(self, event: Event) -> None:
        if event.type in OUTCOME_STATUS:
            await self._on_outcome(event)
            return
        command = event.payload.get("command")
        if command == "cancel":
            self.outcome = (SessionStatus.CANCELLED, event.description or "cancelled by user")
        elif command == "approve":
            await self.brain.approve(event)
        elif event.type in USER_CHANGES:
            self.brain.note(event)

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

    # --- deliberation ---------------------------------------------------------------------
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
        if self._candidates or self._running():
            return  # cheap exit while work is obviously left
        deadline = self.info.options.deadline_s or self.settings.session_deadline_s
        if deadline and time.time() > self.info.started_at + deadline:
            self.outcome = (
                SessionStatus.FAILED,
                f"session deadline of {deadline:g}s passed; partial results kept",
            )
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
                f"steps failed and were skipped past: {', '.join(failed)}" if failed else "",
            )

    async def skip_descendants(self, step_id: str) -> None:
        skipped = [
            d for d in sorted(descendants(self.plan, step_id)) if not has_ended(self.states[d])
        ]
        for d in skipped:
            self.states[d].status = StepStatus.SKIPPED
            self.states[d].note = f"dependency {step_id!r} did not complete"
            self.dirty.add(d)
        ops = [
            self.store.step_write(self.sid, d, status="skipped", note=self.states[d].note)
            for d in skipped
        ]
        await self.store.write(self.sid, self.epoch, ops)
        if skipped:
            await self.append_event(
                Event(
                    type=EventType.DEPENDENCY_BROKEN,
                    severity=Severity.INFO,
                    step_id=step_id,
                    description=f"{step_id} did not complete; skipped {', '.join(skipped)}",
                    payload={"skipped": skipped},
                ),
            )

    async def cancel_steps(
        self, step_ids: list[str], reason: str = "cancelled by a re-plan"
    ) -> None:
        """Cancel steps that have not ended: revoke and fence running attempts."""
        running = [i for i in step_ids if self.states[i].status == StepStatus.RUNNING]
        self.ctx.dispatcher.revoke(self.states[i].task_id for i in running)
        for step_id in running:
            st = self.states[step_id]
            await self.store.end_attempt(
                self.sid,
                self.epoch,
                step_id,
                st.attempt,
                status=StepStatus.CANCELLED.value,
                event=Event(
                    type=EventType.TASK_INTERRUPTED,
                    step_id=step_id,
                    attempt=st.attempt,
                    description=reason,
                    payload={"error_kind": "cancelled"},
                ),
            )
        ops = []
        for step_id in step_ids:
            st = self.states[step_id]
            if step_id in running or not has_ended(st):
                st.status, st.note = StepStatus.CANCELLED, reason
                ops.append(self.store.step_write(self.sid, step_id, status=st.status, note=reason))
                self.dirty.add(step_id)
        await self.store.write(self.sid, self.epoch, ops)

    async def count_replan(self) -> None:
        self.info = self.info.model_copy(update={"replans": self.info.replans + 1})
        await self.store.write(
            self.sid,
            self.epoch,
            [("HSET", self.store.keys.session(self.sid), ["replans", self.info.replans])],
        )
        self.batch.session["replans"] = self.info.replans

    async def install_plan(self, plan: Plan, *, reason: str, replan: bool) -> None:
        """Store ``plan`` as the next version and run it from here on.

        Steps of the old version that the new one drops are cancelled; new steps start
        pending; a re-used id keeps counting attempts so task ids stay unique.
        """
        version = self.info.plan_version + 1
        keys, raw = self.store.keys, plan.model_dump_json()
        ops: list[tuple[str, str, list[Any]]] = [("SET", keys.plan(self.sid, version), [raw, "NX"])]
        for step_id in [i for i in self.steps if i not in {s.id for s in plan.steps}]:
            if not has_ended(self.states[step_id]):
                ops.append(
                    self.store.step_write(
                        self.sid, step_id, status="cancelled", note="dropped by re-plan"
                    )
                )
            self.states.pop(step_id, None)
        for step in plan.steps:
            old = self.states.get(step.id)
            # New ids start fresh, and so do dropped steps a re-plan brings back; a step
            # that failed for good and stays (a fallback took its place) keeps its state.
            if old is None or old.status in (StepStatus.CANCELLED, StepStatus.SKIPPED):
                fresh = StepState(attempt=old.attempt if old else 0)
                self.states[step.id] = fresh
                ops.append(self.store.step_write(self.sid, step.id, **fresh.to_fields()))
                self.dirty.add(step.id)
        replans = self.info.replans + (1 if replan else 0)
        ops.append(("HSET", keys.session(self.sid), ["plan_version", version, "replans", replans]))
        await self.store.write(self.sid, self.epoch, ops)
        self._use_plan(plan)
        self._reindex()
        self.info = self.info.model_copy(update={"plan_version": version, "replans": replans})
        self.batch.plan_versions.append(
            {"version": version, "plan": raw, "reason": reason, "created_at": time.time()}
        )
        self.batch.session.update({"plan_version": version, "replans": replans})
        log.info(
            "session=%s plan version %d installed (%d steps): %s",
            self.sid,
            version,
            len(plan.steps),
            reason,
        )

    # --- dispatch -------------------------------------------------------------------------
    def _ready(self, now: float) -> list[str]:
        """Steps to dispatch now, in plan order, within the session's concurrency cap."""
        slots = self._concurrency() - self._running()
        ready: list[str] = []
        for step_id in sorted(self._candidates, key=lambda i: self._order.get(i, 0)):
            if len(ready) >= slots:
                break
            st = self.states.get(step_id)
            if st is None or st.status not in (StepStatus.PENDING, StepStatus.READY):
                self._candidates.discard(step_id)
                continue
            deps = self.steps[step_id].dependencies
            if any(self.states[d].status != StepStatus.COMPLETED for d in deps if d in self.states):
                self._candidates.discard(step_id)  # re-added when its last dependency completes
                continue
            if st.not_before <= now:
                ready.append(step_id)
        return ready

    async def _dispatch_ready(self) -> None:
        now = time.time()
        batch: list[StepTaskArgs] = []
        for step_id in self._ready(now):
            try:
                params = await self._params(step_id)
            except PlanError as exc:
                st = self.states[step_id]
                st.status, st.error, st.error_kind = (
                    StepStatus.FAILED,
                    str(exc),
                    ErrorKind.PERMANENT,
                )
                st.attempt += 1
                await self._decide_failure(step_id)
                continue
            batch.append(self._task_args(step_id, self.states[step_id].attempt + 1, params))
        if not batch:
            return
        ops = []
        for args in batch:
            st = self.states[args.step_id]
            st.status, st.attempt, st.epoch = StepStatus.RUNNING, args.attempt, self.epoch
            st.task_id, st.dispatched_at = args.task_id, now
            st.started_at = st.finished_at = st.not_before = 0.0
            st.worker = st.error = st.error_kind = st.output_ref = st.note = ""
            ops.append(self.store.step_write(self.sid, args.step_id, **st.to_fields()))
            self.dirty.add(args.step_id)
            self._candidates.discard(args.step_id)
            self._inflight.add(args.step_id)
        await self.store.write(self.sid, self.epoch, ops)
        self.ctx.dispatcher.send(*batch)

    async def load_outputs(self, step_ids: list[str]) -> None:
        """Fetch the stored outputs of completed steps not yet in memory."""
        wanted = [
            i
            for i in step_ids
            if i not in self.outputs and i in self.states and self.states[i].output_ref
        ]
        if wanted:
            values = await self.store.outputs([self.states[i].output_ref for i in wanted])
            self.outputs.update(
                {i: v for i, v in zip(wanted, values, strict=True) if v is not None}
            )

    async def _params(self, step_id: str) -> dict[str, Any]:
        step = self.steps[step_id]
        await self.load_outputs(sorted(find_references(step.params)))
        return resolve_params(step.params, self.outputs, step_id=step_id)

    def _task_args(self, step_id: str, attempt: int, params: dict[str, Any]) -> StepTaskArgs:
        step = self.steps[step_id]
        return StepTaskArgs(
            session_id=self.sid,
            step_id=step_id,
            attempt=attempt,
            epoch=self.epoch,
            tool=step.tool,
            params=params,
            timeout_s=self.timeout(step),
            idempotency_key=f"{self.sid}:{step_id}",
            critical=step.critical,
            expect=[e.model_dump(mode="json") for e in step.expect],
        )

    # --- timers ---------------------------------------------------------------------------
    def _block_ms(self) -> int:
        now, wake = time.time(), time.time() + 1.0
        for step_id in self._candidates:
            st = self.states.get(step_id)
            if st is not None and st.status == StepStatus.READY and st.not_before > now:
                wake = min(wake, st.not_before)
        return max(1, int((wake - now) * 1000))

    async def _watchdog(self) -> None:
        """End attempts whose worker vanished: started, and silent past timeout + grace."""
        now, grace = time.time(), self.settings.watchdog_grace_s
        self._running()
        for step_id in sorted(self._inflight):
            st = self.states[step_id]
            limit = self.timeout(self.steps[step_id]) + grace
            if now < st.dispatched_at + limit:
                continue
            fresh = await self.store.step(self.sid, step_id)
            if fresh is None or fresh.status != StepStatus.RUNNING:
                continue
            if not fresh.started_at:
                # Never claimed: still queued behind others, or taken by a worker that died
                # before starting it (the broker would redeliver only after its visibility
                # timeout). Sending the same attempt again costs no retry either way.
                log.info(
                    "session=%s step=%s attempt=%d unclaimed: re-sent",
                    self.sid,
                    step_id,
                    st.attempt,
                )
                await self._resend(step_id)
                continue
            if now < fresh.started_at + limit:
                continue
            await self.store.end_attempt(
                self.sid,
                self.epoch,
                step_id,
                st.attempt,
                status=StepStatus.INTERRUPTED.value,
                event=Event(
                    type=EventType.TASK_INTERRUPTED,
                    severity=Severity.CRITICAL
                    if self.steps[step_id].critical
                    else Severity.WARNING,
                    step_id=step_id,
                    attempt=st.attempt,
                    description=f"attempt {st.attempt} lost: silent {limit:g}s after it started",
                    payload={
                        "error_kind": ErrorKind.LOST.value,
                        "worker": fresh.worker,
                        "started_at": fresh.started_at,
                    },
                ),
            )

    # --- checkpoint -----------------------------------------------------------------------
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

    async def append_event(self, event: Event) -> None:
        """Append an event of the supervisor's own and record it with this batch."""
        entry_id = await self.store.append_event(self.sid, event)
        self.batch.events.append((entry_id, event))

    # --- helpers --------------------------------------------------------------------------
    async def _write_step(self, step_id: str, **fields: Any) -> None:
        self.dirty.add(step_id)
        await self.store.write(
            self.sid, self.epoch, [self.store.step_write(self.sid, step_id, **fields)]
        )

    def _concurrency(self) -> int:
        return self.info.options.concurrency or self.settings.session_concurrency

    def _max_retries(self, step: Step) -> int:
        return self.settings.default_max_retries if step.max_retries is None else step.max_retries

    def timeout(self, step: Step) -> float:
        if step.timeout_s is not None:
            return step.timeout_s
        if step.tool in self.ctx.tools:
            spec_timeout = self.ctx.tools.get(step.tool).timeout_s
            if spec_timeout is not None:
                return spec_timeout
        return self.settings.default_step_timeout_s
