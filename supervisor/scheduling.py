"""Scheduling: which steps run now, sending their attempts, and the watchdog for lost ones."""

from __future__ import annotations

import logging
import time
from contextlib import closing

from core.errors import PlanError
from core.models import ErrorKind, Severity, StepStatus, StepTaskArgs, task_id
from core.values import ValueLimits
from planner.references import find_references, resolve_params
from supervisor.big_params import SentParams, send_params
from supervisor.consumers import ConsumerMonitor
from supervisor.context import SupervisorContext
from supervisor.session_base import SessionBase

log = logging.getLogger(__name__)

WATCHDOG_INTERVAL_S = 0.1


class Scheduling(SessionBase):
    """Dispatch in plan order under the concurrency cap, the moment dependencies complete."""

    def __init__(self, ctx: SupervisorContext, sid: str, epoch: int) -> None:
        super().__init__(ctx, sid, epoch)
        # (step, attempt) re-sent and found still queued -> when to look at it again.
        self._look_again: dict[tuple[str, int], float] = {}
        self._consumers = ConsumerMonitor(ctx.store, sid, ctx.settings, self.append_event)

    def _ready(self, now: float) -> list[str]:
        """Steps to dispatch now, in plan order, within the session's concurrency cap."""
        slots = self._concurrency() - self._running()
        ready: list[str] = []
        if slots <= 0:
            return ready
        with closing(self._candidates.scan()) as candidates:
            for step_id in candidates:
                st = self.states.get(step_id)
                if st is None or st.status not in (StepStatus.PENDING, StepStatus.READY):
                    self._candidates.discard(step_id)
                    continue
                deps = self.steps[step_id].dependencies
                if any(
                    self.states[d].status != StepStatus.COMPLETED for d in deps if d in self.states
                ):
                    self._candidates.discard(step_id)  # re-added when its last dependency ends
                    continue
                if self.steps[step_id].requires_approval and step_id not in self.approved:
                    self._awaiting_approval.add(step_id)  # announced by the loop, once
                    continue
                if st.not_before <= now:
                    ready.append(step_id)
                    if len(ready) >= slots:
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
            self._candidates.discard(args.step_id)
            self._inflight.add(args.step_id)
        # Marked running and queued in one fenced call: both happen, or neither does.
        await self.store.write(self.sid, self.epoch, ops + self.ctx.dispatcher.commands(*batch))

    async def _resend(self, step_id: str) -> bool:
        """Send a dispatched, never started attempt again under the same task id, unless
        its second copy is still queued; returns whether a copy went out.

        The copy carries the epoch the step hash was dispatched at, so the worker's claim
        matches; whichever delivery claims first runs, any other is dropped as a duplicate.
        The step hash remembers (``resent``) that the attempt got its second copy, so a later
        look (this owner's watchdog, or the next owner's takeover) sends another only when
        no copy is left in the queue (taken by a worker that died before claiming it): the
        queue never holds more than two copies of an attempt, however long nobody consumes.
        """
        st = self.states[step_id]
        attempt_id = task_id(self.sid, step_id, st.attempt)
        if st.resent == st.attempt and await self.store.queued(self.settings.queue, attempt_id):
            return False
        args = self._task_args(step_id, st.attempt, await self._params(step_id))
        st.dispatched_at, st.resent = time.time(), st.attempt
        queue = self.ctx.dispatcher.commands(args.model_copy(update={"epoch": st.epoch}))
        await self._write_step(
            step_id, along=queue, dispatched_at=st.dispatched_at, resent=st.resent
        )
        return True

    async def _params(self, step_id: str) -> SentParams:
        step = self.steps[step_id]
        await self.load_outputs(sorted(find_references(step.params)))
        params = resolve_params(step.params, self.outputs, step_id=step_id)
        limits = ValueLimits.from_settings(self.settings)
        return await send_params(
            self.store,
            step,
            params,
            states=self.states,
            outputs=self.outputs,
            limits=limits,
            ttl_s=self.settings.blob_ttl_s,
        )

    def _task_args(self, step_id: str, attempt: int, params: SentParams) -> StepTaskArgs:
        step = self.steps[step_id]
        return StepTaskArgs(
            session_id=self.sid,
            step_id=step_id,
            attempt=attempt,
            epoch=self.epoch,
            tool=step.tool,
            params=params.inline,
            param_refs=params.refs,
            timeout_s=self.timeout(step),
            idempotency_key=f"{self.sid}:{step_id}",
            critical=step.critical,
            expect=[e.model_dump(mode="json") for e in step.expect],
        )

    def _block_ms(self) -> int:
        """How long to wait for events: at most 1 s, less when a retry's back-off ends."""
        now, wake = time.time(), time.time() + 1.0
        for step_id in list(self._backing_off):
            st = self.states.get(step_id)
            if st is None or st.status != StepStatus.READY or st.not_before <= now:
                self._backing_off.discard(step_id)
            else:
                wake = min(wake, st.not_before)
        return max(1, int((wake - now) * 1000))

    async def _watchdog(self) -> None:
        """End attempts whose worker vanished: started, and silent past timeout + grace.

        A sweep looks at every step in flight, so it runs at most every
        ``WATCHDOG_INTERVAL_S``, not on every loop turn: attempts are declared lost seconds
        after their timeout, never milliseconds.
        """
        now, grace = time.time(), self.settings.watchdog_grace_s
        await self._consumers.tick(now, self._running_attempts)
        if now < self._next_sweep:
            return
        self._next_sweep = now + WATCHDOG_INTERVAL_S
        self._running()
        for step_id in sorted(self._inflight):
            st = self.states[step_id]
            limit = self.timeout(self.steps[step_id]) + grace
            look_at = self._look_again.get((step_id, st.attempt), 0.0)
            if now < max(st.dispatched_at + limit, look_at):
                continue
            fresh = await self.store.step(self.sid, step_id)
            if fresh is None or fresh.status != StepStatus.RUNNING:
                continue
            if not fresh.started_at:
                # Never claimed: still queued behind others, or taken by a worker that died
                # before starting it (the broker would redeliver only after its visibility
                # timeout). Sending the same attempt again costs no retry either way.
                st.resent = fresh.resent
                sent = await self._resend(step_id)
                self._look_again = {k: t for k, t in self._look_again.items() if t > now}
                if not sent:
                    self._look_again[(step_id, st.attempt)] = now + limit
                log.info(
                    "session=%s step=%s attempt=%d unclaimed: %s",
                    self.sid,
                    step_id,
                    st.attempt,
                    "re-sent" if sent else "its second copy is still queued",
                )
                continue
            if now < fresh.started_at + limit:
                continue
            await self.end_attempt(
                step_id,
                st.attempt,
                status=StepStatus.INTERRUPTED,
                error_kind=ErrorKind.LOST.value,
                description=f"attempt {st.attempt} lost: silent {limit:g}s after it started",
                severity=Severity.CRITICAL if self.steps[step_id].critical else Severity.WARNING,
                worker=fresh.worker,
                started_at=fresh.started_at,
            )

    def _running_attempts(self) -> dict[str, int]:
        """Step id -> attempt of what we dispatched and has not ended."""
        self._running()
        return {i: self.states[i].attempt for i in self._inflight}
