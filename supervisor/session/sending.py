"""Sending steps: dispatch what the scheduler picks to a queue a live worker serving its tool
consumes (core/routing.py), hold back steps no live worker serves (bounded), re-send
unclaimed attempts, and the watchdog for lost ones."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from planloop.core.errors import PlanError, PlanReferenceError
from planloop.core.models import (
    ErrorKind,
    Event,
    EventType,
    Severity,
    StepState,
    StepStatus,
    StepTaskArgs,
    idempotency_key,
    task_id,
)
from planloop.core.values import ValueLimits
from planloop.planner.plan import Step
from planloop.planner.react_step import REACT_TOOL
from planloop.planner.references import find_references, resolve_params
from planloop.supervisor.io.big_params import SentParams, send_params
from planloop.supervisor.io.step_message import Op
from planloop.supervisor.process.no_consumer_watch import ConsumerMonitor
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.schedule import ready_steps
from planloop.supervisor.session.state import OPEN

log = logging.getLogger(__name__)

WATCHDOG_INTERVAL_S = 0.1
UNSERVED = "unserved"  # the notice (event payload, progress note) of a step no worker serves
SERVED = "served"  # ... and of its end: a live worker serves the tool now
UNSERVED_FAILED = "unserved_failed"  # ... or: the wait ended, the step failed
# The step fields a dispatch clears (it sets the others it writes).
CLEARED = (
    *("worker", "started_at", "finished_at", "not_before"),
    *("error", "error_kind", "output_ref", "note"),
)
SENT = ("status", "attempt", "epoch", "task_id", "dispatched_at", "queue")


class TaskQueue(Protocol):
    """Routes steps and turns attempts into the ops that queue them
    (``supervisor.io.step_queue.Dispatcher``)."""

    def route(self, step: Step) -> str | None: ...

    def commands(self, *attempts: StepTaskArgs) -> list[Op]: ...


class Scheduling:
    """Dispatch in plan order under the concurrency cap, the moment dependencies complete."""

    def __init__(
        self,
        io: SessionIO,
        queue: TaskQueue,
        *,
        on_failure: Callable[[str], Awaitable[None]],
        consumers: ConsumerMonitor | None = None,
    ) -> None:
        self.io = io
        self.state = io.state
        self.queue = queue
        self.on_failure = on_failure  # settles a failed attempt (the session loop's job)
        self.consumers = consumers
        # (step, attempt) re-sent and found still queued -> when to look at it again.
        self._look_again: dict[tuple[str, int], float] = {}
        self._next_sweep = 0.0  # when the watchdog looks at the steps in flight next
        self.unresolved: set[str] = set()  # steps failed by a reference that cannot resolve
        # Ready steps whose tool no live worker serves -> when this owner first saw it.
        self.waiting: dict[str, float] = {}
        self._warned: set[str] = set()  # tools warned about while steps wait for them

    def first_owner(self) -> None:
        """The session was never owned before (nothing of a former owner to look at)."""
        if self.consumers is not None:
            self.consumers.first_owner()

    async def dispatch_ready(self) -> None:
        """Mark the ready steps running and queue their attempts, in one fenced write."""
        state, now = self.state, time.time()
        batch: list[StepTaskArgs] = []
        if self.waiting:
            await self._look_at_waiting(now)
        for step_id in ready_steps(state, now, self.io.concurrency(), skip=self.waiting):
            queue = self.queue.route(state.steps[step_id])
            if queue is None:
                await self._wait_for_worker(step_id, now)
                continue
            try:
                params = await self._params(step_id)
            except PlanError as exc:
                st = state.states[step_id]
                st.status, st.error, st.error_kind = (
                    StepStatus.FAILED,
                    str(exc),
                    ErrorKind.PERMANENT,
                )
                st.attempt += 1
                if isinstance(exc, PlanReferenceError):
                    self.unresolved.add(step_id)
                await self.on_failure(step_id)
                continue
            batch.append(self._task_args(step_id, state.states[step_id].attempt + 1, params, queue))
        if not batch:
            return
        # Marked running and queued in one fenced call: both happen, or neither does.
        await self.io.write(self._mark_sent(batch, now))

    def _mark_sent(self, batch: list[StepTaskArgs], now: float) -> list[Op]:
        """Mark ``batch``'s steps running; the ops that write them and queue the attempts."""
        state = self.state
        ops: list[Op] = []
        for args in batch:
            st = state.states[args.step_id]
            # A first attempt writes by field: no worker has written the step's hash yet, so
            # of the fields a dispatch clears only those set here need clearing there.
            stale = [n for n in CLEARED if getattr(st, n)] if args.attempt == 1 else None
            st.status, st.attempt, st.epoch = StepStatus.RUNNING, args.attempt, self.io.epoch
            st.task_id, st.dispatched_at, st.queue = args.task_id, now, args.queue
            st.started_at = st.finished_at = st.not_before = 0.0
            st.worker = st.error = st.error_kind = st.output_ref = st.note = ""
            fields = st.to_fields() if stale is None else _sent_fields(st, stale)
            ops.append(self.io.store.step_write(self.io.sid, args.step_id, **fields))
            state.dirty.add(args.step_id)
            state.candidates.discard(args.step_id)
            state.inflight.add(args.step_id)
        return ops + self.queue.commands(*batch)

    async def resend(self, step_id: str) -> bool:
        """Send a dispatched, never started attempt again under the same task id, unless
        its second copy is still queued; returns whether a copy went out.

        The copy carries the epoch the step hash was dispatched at, so the worker's claim
        matches; whichever delivery claims first runs, any other is dropped as a duplicate.
        The step hash remembers (``resent``) that the attempt got its second copy, so a later
        look (this owner's watchdog, or the next owner's takeover) sends another only when
        no copy is left in the queue (taken by a worker that died before claiming it): the
        queue never holds more than two copies of an attempt, however long nobody consumes.
        A copy goes to the queue the step is routed to now (core/routing.py).
        """
        io, st = self.io, self.state.states[step_id]
        attempt_id = task_id(io.sid, step_id, st.attempt)
        # Routed again: the pool it went to may have lost its workers since (stopped, or
        # dead with their heartbeats expired), and a step hash rebuilt from SQL does not say
        # where it went. The same task id makes a copy in another queue a duplicate the
        # claim drops. With no live worker serving it, the copy goes where the first went
        # (nowhere, when that is unknown: the watchdog looks again after timeout + grace).
        queue = self.queue.route(self.state.steps[step_id]) or st.queue
        if not queue:
            return False
        moved = queue != (st.queue or io.settings.queue)
        if not moved and st.resent == st.attempt and await io.store.queued(queue, attempt_id):
            return False
        args = self._task_args(step_id, st.attempt, await self._params(step_id), queue)
        st.dispatched_at, st.resent, st.queue = time.time(), st.attempt, queue
        sent = {"epoch": st.epoch, "dispatched_at": st.dispatched_at}
        ops = self.queue.commands(args.model_copy(update=sent))
        await io.write_step(
            step_id, along=ops, dispatched_at=st.dispatched_at, resent=st.resent, queue=queue
        )
        return True

    async def _params(self, step_id: str) -> SentParams:
        step = self.state.steps[step_id]
        await self.io.load_outputs(sorted(find_references(step.params)))
        params = resolve_params(step.params, self.state.outputs, step_id=step_id)
        return await send_params(
            self.io.store,
            step,
            params,
            states=self.state.states,
            outputs=self.state.outputs,
            limits=ValueLimits.from_settings(self.io.settings),
            ttl_s=self.io.settings.blob_ttl_s,
        )

    def _task_args(
        self, step_id: str, attempt: int, params: SentParams, queue: str
    ) -> StepTaskArgs:
        step, sid = self.state.steps[step_id], self.io.sid
        return StepTaskArgs(
            session_id=sid,
            step_id=step_id,
            attempt=attempt,
            epoch=self.io.epoch,
            tool=step.tool,
            params=params.inline,
            param_refs=params.refs,
            timeout_s=self.io.timeout(step),
            idempotency_key=idempotency_key(sid, step_id, self.state.info.redone.get(step_id, 0)),
            critical=step.critical,
            expect=[e.model_dump(mode="json") for e in step.expect],
            instruction=step.instruction if step.tool == REACT_TOOL else "",
            max_retries=self.io.max_retries(step),
            dispatched_at=time.time(),
            queue=queue,
            requested_by=self.state.states[step_id].requested_by,
        )

    # --- steps no live worker serves -------------------------------------------------------
    async def _wait_for_worker(self, step_id: str, now: float) -> None:
        """Hold back a ready step whose tool no live worker serves, and say so once per
        tool: a log WARNING, a WARNING notice event and a progress note naming the tool
        (``status``, ``watch`` and the console show them); each waiting step's note too."""
        self.waiting[step_id] = now
        io, tool = self.io, self.state.steps[step_id].tool
        st = self.state.states[step_id]
        st.note = f"waiting for a worker that serves {tool}"
        await io.write_step(step_id, note=st.note)
        if tool in self._warned:
            return
        self._warned.add(tool)
        bound = io.settings.unserved_wait_s
        text = f"no live worker serves {tool}: step {step_id} waits up to {bound:g} s for one"
        log.warning(
            "session=%s step=%s %s (start a worker whose PLANLOOP_TOOL_MODULES provides it)",
            io.sid,
            step_id,
            text,
        )
        await io.store.note_progress(io.sid, UNSERVED, step=step_id, tool=tool, wait_s=bound)
        await io.append_event(
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                severity=Severity.WARNING,
                step_id=step_id,
                description=text,
                payload={"notice": UNSERVED, "tool": tool, "wait_s": bound},
            )
        )

    async def _look_at_waiting(self, now: float) -> None:
        """Let a waiting step go once a live worker serves its tool; fail it ``unserved``
        once it waited ``unserved_wait_s`` (or drop it: it left the ready state)."""
        io, state = self.io, self.state
        for step_id, since in sorted(self.waiting.items()):
            st, step = state.states.get(step_id), state.steps.get(step_id)
            if st is None or step is None or st.status not in OPEN:
                del self.waiting[step_id]
            elif self.queue.route(step) is not None:
                del self.waiting[step_id]  # dispatched by this very turn
                await self._clear_warning(step.tool, SERVED)
            elif now - since >= io.settings.unserved_wait_s:
                del self.waiting[step_id]
                st.status, st.error_kind = StepStatus.FAILED, ErrorKind.UNSERVED
                st.error = (
                    f"no live worker serves {step.tool}: waited {now - since:.0f} s for one "
                    "(unserved_wait_s); start a worker whose PLANLOOP_TOOL_MODULES provides it"
                )
                st.attempt += 1
                st.note = ""
                log.warning("session=%s step=%s failed: %s", io.sid, step_id, st.error)
                # what status and show read (the failure path writes only its own fields)
                await io.write([io.store.step_write(io.sid, step_id, **st.to_fields())])
                await self._clear_warning(step.tool, UNSERVED_FAILED)
                await self.on_failure(step_id)

    async def _clear_warning(self, tool: str, kind: str) -> None:
        """The warning about ``tool`` is over once no step waits for it (a progress note)."""
        steps = self.state.steps
        if tool not in self._warned or any(
            i in steps and steps[i].tool == tool for i in self.waiting
        ):
            return
        self._warned.discard(tool)
        log.info("session=%s %s: %s", self.io.sid, tool, kind)
        await self.io.store.note_progress(self.io.sid, kind, tool=tool)

    async def watchdog(self) -> None:
        """End attempts whose worker vanished: started, and silent past timeout + grace.

        A sweep looks at every step in flight, so it runs at most every
        ``WATCHDOG_INTERVAL_S``, not on every loop turn: attempts are declared lost seconds
        after their timeout, never milliseconds.
        """
        io, state = self.io, self.state
        now, grace = time.time(), io.settings.watchdog_grace_s
        if self.consumers is not None:
            await self.consumers.tick(now, state.running_attempts)
        if now < self._next_sweep:
            return
        self._next_sweep = now + WATCHDOG_INTERVAL_S
        state.running()
        for step_id in sorted(state.inflight):
            st = state.states[step_id]
            limit = io.timeout(state.steps[step_id]) + grace
            look_at = self._look_again.get((step_id, st.attempt), 0.0)
            if now < max(st.dispatched_at + limit, look_at):
                continue
            fresh = await io.store.step(io.sid, step_id)
            if fresh is None or fresh.status != StepStatus.RUNNING:
                continue
            if not fresh.started_at:
                # Never claimed: still queued behind others, or taken by a worker that died
                # before starting it (the broker would redeliver only after its visibility
                # timeout). Sending the same attempt again costs no retry either way.
                st.resent = fresh.resent
                sent = await self.resend(step_id)
                self._look_again = {k: t for k, t in self._look_again.items() if t > now}
                if not sent:
                    self._look_again[(step_id, st.attempt)] = now + limit
                log.info(
                    "session=%s step=%s attempt=%d unclaimed: %s",
                    io.sid,
                    step_id,
                    st.attempt,
                    "re-sent" if sent else "its second copy is still queued",
                )
                continue
            if now < fresh.started_at + limit:
                continue
            await io.end_attempt(
                step_id,
                st.attempt,
                status=StepStatus.INTERRUPTED,
                error_kind=ErrorKind.LOST.value,
                description=f"attempt {st.attempt} lost: silent {limit:g}s after it started",
                severity=Severity.CRITICAL if state.steps[step_id].critical else Severity.WARNING,
                worker=fresh.worker,
                started_at=fresh.started_at,
            )


def _sent_fields(st: StepState, stale: list[str]) -> dict[str, object]:
    """The fields a dispatch sets, and the cleared ones that held something."""
    return {name: getattr(st, name) for name in (*SENT, *stale)}
