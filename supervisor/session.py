"""One session's loop: dispatch ready steps, consume events, decide, checkpoint, acknowledge."""

from __future__ import annotations

import logging
import time
from typing import Any

from core.errors import FencedOutError, PlanError, SessionError
from core.hot_state import dumps
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
from planner.dag import descendants
from planner.plan import Plan, Step
from planner.references import find_references, resolve_params
from supervisor.context import SupervisorContext
from supervisor.policy import RuleAction, backoff_s, decide_failure
from supervisor.report import build_report

log = logging.getLogger(__name__)

FINAL = "final"
OUTCOME_STATUS = {
    EventType.TASK_COMPLETED: StepStatus.COMPLETED,
    EventType.TASK_UNEXPECTED_RESULT: StepStatus.COMPLETED,
    EventType.TASK_FAILED: StepStatus.FAILED,
    EventType.TASK_INTERRUPTED: StepStatus.INTERRUPTED,
}


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
        self.batch = Checkpoint()
        self.dirty: set[str] = set()
        self.acks: list[str] = []
        self.outcome: tuple[SessionStatus, str] | None = None

    # --- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """Drive the session to its end, or until another supervisor fences us out.

        1. Load the plan version and step states; record the takeover in SQL.
        2. Settle outcomes recorded while nobody watched; re-send attempts never started.
        3. Take over events a former owner left unacknowledged and apply them.
        4. Until every step has ended: dispatch ready steps, wait for events or the next
           timer, apply the events, run the watchdog, checkpoint to SQL, acknowledge.
        5. Write the report, end the session, release the lease (by the caller).
        """
        try:
            await self._load()
            await self._settle_recorded()
            await self._apply(await self.store.claim_pending(self.sid, self.ctx.name))
            while self.outcome is None:
                await self._dispatch_ready()
                # Checkpoint after dispatching: the next steps start without waiting on SQL.
                await self._checkpoint()
                if self.outcome is not None:
                    break
                entries = await self.store.read_events(
                    self.sid,
                    self.ctx.name,
                    count=self.settings.event_batch,
                    block_ms=self._block_ms(),
                )
                await self._apply(entries)
                await self._watchdog()
                if self.outcome is None and all(has_ended(s) for s in self.states.values()):
                    self.outcome = self._natural_outcome()
            await self._finish(*self.outcome)
        except FencedOutError:
            log.warning(
                "session=%s epoch=%d fenced out: another supervisor owns it", self.sid, self.epoch
            )

    # --- 1. load --------------------------------------------------------------------------
    async def _load(self) -> None:
        info = await self.store.session(self.sid)
        if info is None:
            raise SessionError("session has no hot state", session_id=self.sid)
        self.info = info
        raw = await self.store.plan_json(self.sid, info.plan_version)
        if raw is None:
            raise SessionError(f"plan version {info.plan_version} is missing", session_id=self.sid)
        self.plan = Plan.model_validate_json(raw)
        self.steps = {s.id: s for s in self.plan.steps}
        self.states = await self.store.steps(self.sid, self.steps)
        for step_id in self.steps:
            self.states.setdefault(step_id, StepState())
        await self.store.ensure_groups(self.sid)
        now = time.time()
        started = info.started_at or now
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
        self.batch.plan_versions.append(
            {"version": info.plan_version, "plan": raw, "reason": "submitted", "created_at": now}
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
        log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)

    # --- 2. settle what happened while nobody watched --------------------------------------
    async def _settle_recorded(self) -> None:
        for step_id, st in self.states.items():
            if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note != FINAL:
                await self._decide_failure(step_id)
            elif st.status == StepStatus.RUNNING and not st.started_at:
                # Dispatched but maybe never queued (we died in between): send the same
                # attempt again under the same task id; a duplicate delivery is dropped.
                self.ctx.dispatcher.send(
                    self._task_args(step_id, st.attempt, await self._params(step_id))
                )

    # --- 3/4. events ----------------------------------------------------------------------
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
        elif event.type == EventType.EXTERNAL_SIGNAL and event.payload.get("command") == "cancel":
            self.outcome = (SessionStatus.CANCELLED, event.description or "cancelled by user")

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
            await self._decide_failure(event.step_id)

    async def _decide_failure(self, step_id: str) -> None:
        step, st = self.steps[step_id], self.states[step_id]
        max_retries = self._max_retries(step)
        action = decide_failure(step, st.attempt, st.error_kind, max_retries)
        if action == RuleAction.FALLBACK:
            action = RuleAction.SKIP_BRANCH if not step.critical else RuleAction.FAIL_SESSION
        log.info(
            "session=%s step=%s attempt=%d %s (%s): %s",
            self.sid,
            step_id,
            st.attempt,
            st.status.value,
            st.error_kind,
            action.value,
        )
        if action == RuleAction.RETRY:
            st.status = StepStatus.READY
            st.not_before = time.time() + backoff_s(
                st.attempt, self.settings.retry_backoff_s, self.settings.retry_backoff_max_s
            )
            await self._write_step(step_id, status=st.status, not_before=st.not_before)
            return
        st.note = FINAL
        if st.status == StepStatus.READY:
            st.status = StepStatus.FAILED
        await self._write_step(step_id, status=st.status, note=FINAL)
        if action == RuleAction.SKIP_BRANCH:
            await self._skip_descendants(step_id)
        else:
            self.outcome = (SessionStatus.FAILED, f"critical step {step_id!r} failed: {st.error}")

    async def _skip_descendants(self, step_id: str) -> None:
        skipped = [
            d for d in sorted(descendants(self.plan, step_id)) if not has_ended(self.states[d])
        ]
        for d in skipped:
            self.states[d].status = StepStatus.SKIPPED
            self.states[d].note = f"dependency {step_id!r} did not complete"
        ops = [
            self.store.step_write(self.sid, d, status="skipped", note=self.states[d].note)
            for d in skipped
        ]
        await self.store.write(self.sid, self.epoch, ops)
        if skipped:
            await self.store.append_event(
                self.sid,
                Event(
                    type=EventType.DEPENDENCY_BROKEN,
                    severity=Severity.WARNING,
                    step_id=step_id,
                    description=f"{step_id} failed; skipped {', '.join(skipped)}",
                    payload={"skipped": skipped},
                ),
            )

    # --- dispatch -------------------------------------------------------------------------
    def _ready(self, now: float) -> list[str]:
        running = sum(1 for s in self.states.values() if s.status == StepStatus.RUNNING)
        slots = self._concurrency() - running
        if slots <= 0:
            return []
        ready = []
        for step in self.plan.steps:
            st = self.states[step.id]
            if st.status not in (StepStatus.PENDING, StepStatus.READY) or st.not_before > now:
                continue
            if all(self.states[d].status == StepStatus.COMPLETED for d in step.dependencies):
                ready.append(step.id)
                if len(ready) == slots:
                    break
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
        await self.store.write(self.sid, self.epoch, ops)
        for args in batch:
            self.ctx.dispatcher.send(args)

    async def _params(self, step_id: str) -> dict[str, Any]:
        step = self.steps[step_id]
        needed = [d for d in find_references(step.params) if d not in self.outputs]
        if needed:
            refs = [self.states[d].output_ref if d in self.states else "" for d in needed]
            for d, value in zip(needed, await self.store.outputs(refs), strict=True):
                if value is not None:
                    self.outputs[d] = value
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
            timeout_s=self._timeout(step),
            idempotency_key=f"{self.sid}:{step_id}",
            critical=step.critical,
            expect=[e.model_dump(mode="json") for e in step.expect],
        )

    # --- timers ---------------------------------------------------------------------------
    def _block_ms(self) -> int:
        now, wake = time.time(), time.time() + 1.0
        for st in self.states.values():
            if st.status == StepStatus.READY and st.not_before > now:
                wake = min(wake, st.not_before)
        return max(1, int((wake - now) * 1000))

    async def _watchdog(self) -> None:
        """End attempts whose worker vanished: started, and silent past timeout + grace."""
        now, grace = time.time(), self.settings.watchdog_grace_s
        for step_id, st in self.states.items():
            if st.status != StepStatus.RUNNING:
                continue
            limit = self._timeout(self.steps[step_id]) + grace
            if now < st.dispatched_at + limit:
                continue
            fresh = await self.store.step(self.sid, step_id)
            if fresh is None or not fresh.started_at or now < fresh.started_at + limit:
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
    async def _checkpoint(self) -> None:
        batch, self.batch = self.batch, Checkpoint()
        dirty, self.dirty = sorted(self.dirty), set()
        acks, self.acks = self.acks, []
        completed = [
            d
            for d in dirty
            if self.states[d].status == StepStatus.COMPLETED and d not in self.outputs
        ]
        if completed:
            values = await self.store.outputs([self.states[d].output_ref for d in completed])
            self.outputs.update(
                {d: v for d, v in zip(completed, values, strict=True) if v is not None}
            )
        for step_id in dirty:
            st = self.states[step_id]
            row = st.model_dump(
                include={
                    "status",
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
            row["status"] = st.status.value
            output = self.outputs.get(step_id) if st.status == StepStatus.COMPLETED else None
            batch.attempts.append(
                {
                    "step_id": step_id,
                    "attempt": st.attempt,
                    **row,
                    "output": None if output is None else dumps(output),
                }
            )
        if batch:
            await self.ctx.sql(lambda: self.ctx.record.checkpoint(self.sid, self.epoch, batch))
        await self.store.ack(self.sid, acks)

    # --- 5. finish ------------------------------------------------------------------------
    def _natural_outcome(self) -> tuple[SessionStatus, str]:
        failed = [
            i
            for i, s in self.states.items()
            if s.status in (StepStatus.FAILED, StepStatus.INTERRUPTED)
        ]
        note = f"non-critical steps failed: {', '.join(failed)}" if failed else ""
        return SessionStatus.COMPLETED, note

    async def _finish(self, status: SessionStatus, error: str) -> None:
        await self._stop_unfinished(status)
        now = time.time()
        completed = [
            i
            for i, s in self.states.items()
            if s.status == StepStatus.COMPLETED and i not in self.outputs
        ]
        values = await self.store.outputs([self.states[i].output_ref for i in completed])
        self.outputs.update({i: v for i, v in zip(completed, values, strict=True) if v is not None})
        report = build_report(
            self.sid,
            self.plan,
            self.states,
            self.outputs,
            status=status,
            error=error,
            started_at=self.info.started_at,
            finished_at=now,
            replans=self.info.replans,
            plan_version=self.info.plan_version,
        )
        keys = self.store.keys
        await self.store.write(
            self.sid,
            self.epoch,
            [
                (
                    "HSET",
                    keys.session(self.sid),
                    ["status", status.value, "finished_at", now, "error", error, "report", report],
                ),
                ("SREM", keys.active, [self.sid]),
            ],
        )
        self.batch.session = {
            "status": status.value,
            "finished_at": now,
            "error": error,
            "report": dumps(report),
        }
        await self._checkpoint()
        await self.store.note_progress(self.sid, "ended", status=status.value, error=error)
        log.info("session=%s ended %s%s", self.sid, status.value, f": {error}" if error else "")

    async def _stop_unfinished(self, status: SessionStatus) -> None:
        running = [i for i, s in self.states.items() if s.status == StepStatus.RUNNING]
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
                    description=f"cancelled: session {status.value}",
                    payload={"error_kind": "cancelled"},
                ),
            )
        ops = []
        for step_id, st in self.states.items():
            if not has_ended(st):
                st.status = (
                    StepStatus.CANCELLED
                    if step_id in running or status != SessionStatus.FAILED
                    else StepStatus.SKIPPED
                )
                st.note = st.note or f"session {status.value}"
                ops.append(self.store.step_write(self.sid, step_id, status=st.status, note=st.note))
                self.dirty.add(step_id)
        await self.store.write(self.sid, self.epoch, ops)

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

    def _timeout(self, step: Step) -> float:
        if step.timeout_s is not None:
            return step.timeout_s
        if step.tool in self.ctx.tools:
            spec_timeout = self.ctx.tools.get(step.tool).timeout_s
            if spec_timeout is not None:
                return spec_timeout
        return self.settings.default_step_timeout_s
