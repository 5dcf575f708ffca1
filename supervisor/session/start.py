"""How a session starts: the one path from a lease taken to the loop's first turn.

It has two steps, around the loop wiring its collaborators. :meth:`SessionStart.read` builds
the session's :class:`SessionState` and returns it with the ops its first fenced write
carries; the loop wires its collaborators over that state; :meth:`SessionStart.catch_up`
then brings the state up to date through them. Neither dispatches: the loop's first turn
does, through the store port, which sends the first writes of many sessions starting
together in one round trip.

The read:

1. **Fresh**: a session never owned, with its plan. Taken in a batch (nothing pending, no
   cancel, not streaming: ``batch_start.starts_from_batch``), it starts from what the batch
   read, with no round trip of its own; otherwise it is read first. Its SQL claim is grouped
   with others' in the background, and ``running`` is one of the ops returned (it goes with
   the first dispatch).
2. **Takeover**: a session owned before is claimed in SQL, noted running, and its step
   states read.

The catch-up: the deliberation's memory and LLM usage restored from the session hash (a
takeover's usage reconciled with the ledger), a goal without a plan planned; a session whose
former owner died while its first plan streamed has the planner write the rest (**streamed
resume**); outcomes recorded while nobody watched are settled and attempts never started
re-sent; events a former owner left unacknowledged are taken over.

A session not started from its batch holds a start slot (supervisor/process/admission.py)
until its first turn has dispatched (:meth:`SessionStart.started`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from planloop.core.errors import HotStateLostError, SessionEndedError, SessionError
from planloop.core.hot_state import plan_checked
from planloop.core.metrics import LEASE_TAKEOVERS
from planloop.core.models import SessionRecord, SessionStatus, StepState, StepStatus
from planloop.planner.plan import Plan, load_stored_plan
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.store_port import Entry, WriteOp
from planloop.supervisor.io.stream_flags import STREAMING
from planloop.supervisor.process.batch_start import starts_from_batch
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.process.input_refusal import refuse_bad_input
from planloop.supervisor.session.cancel_watch import CancelWatch, read_cancel
from planloop.supervisor.session.carried import carry_in
from planloop.supervisor.session.claim import claim_session
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.events import SessionEvents
from planloop.supervisor.session.finish import adopt_recorded_ending
from planloop.supervisor.session.llm_usage import LLMUsage
from planloop.supervisor.session.outcomes import Outcomes
from planloop.supervisor.session.ports import CANCEL_FIELD, read_event
from planloop.supervisor.session.sending import Scheduling
from planloop.supervisor.session.state import FINAL, SessionState
from planloop.supervisor.session.streaming import StreamedPlanning
from planloop.supervisor.session.usage_ledger import reconcile_recorded

log = logging.getLogger(__name__)


def record_events(state: SessionState, entries: list[Entry]) -> None:
    """Record (not apply) ``entries`` with the next checkpoint; unreadable ones are left out."""
    for entry_id, fields in entries:
        try:
            state.batch.events.append((entry_id, read_event(fields)))
        except (ValueError, KeyError):
            continue


@dataclass(frozen=True)
class Started:
    """A session's state, and the ops its first fenced write carries (a fresh session's
    ``running``, sent with its first dispatch)."""

    state: SessionState
    ops: list[WriteOp]


@dataclass(frozen=True)
class StartPorts:
    """What a catch-up runs: the collaborators the loop wired over the state the read built,
    the planning of a goal (given the streamed planning it may use), and the streamed
    planning a resume continues."""

    cancel: CancelWatch
    scheduling: Scheduling
    deliberation: Deliberation
    usage: LLMUsage
    events: SessionEvents
    outcomes: Outcomes
    plan_goal: Callable[[StreamedPlanning], Awaitable[None]]
    streamed: Callable[[], StreamedPlanning]


class SessionStart:
    """Reads one session's state from its lease, then catches it up to the loop's first turn."""

    def __init__(
        self, ctx: SupervisorContext, sid: str, epoch: int, taken: Taken | None = None
    ) -> None:
        self.ctx = ctx
        self.sid = sid
        self.epoch = epoch
        self.store = ctx.store
        self.taken = taken  # what the lease's pipeline read for the loop to start from
        self._claiming: asyncio.Task[None] | None = None  # a first owner's claim, in flight
        self._slot = contextlib.AsyncExitStack()  # the start slot, up to the first dispatch
        # What the read found, for the catch-up to act on.
        self._first_owner = False  # never owned before: no former owner's warning
        self._taken_over = False  # owned before, with its plan: the ledger's usage counts
        self._unplanned = False  # a goal without a plan, to plan
        self._streaming = False  # its former owner died while the first plan streamed

    async def read(self) -> Started:
        """Build the session's state: read (from what its lease's pipeline read, when taken
        in a batch), claimed in SQL and noted running, adopted fresh or taken over."""
        # Up to its first dispatch, a session taken with its plan holds a start slot: it
        # goes before the bookkeeping of sessions already running (admission.py). One
        # planning its goal waits on the LLM instead, and holds none; one its batch starts
        # is covered by the batch's.
        planned = self.taken is not None and self.taken.plan_version > 0
        if planned and not starts_from_batch(self.taken):
            await self._slot.enter_async_context(self.ctx.admission.start())
        state = SessionState(self.sid, self.epoch)
        info, raw = await self._read_session(state)
        if not info.started_at:  # never owned: what the producer checks, checked again
            fields = self.taken.fields if self.taken is not None else {}
            refuse_bad_input(info, raw, fields, self.ctx.settings)
        state.info = info
        if info.plan_version and raw is None:
            # Wiped between the two reads: claiming now would record a session without
            # its plan, which no rebuild could ever restore.
            raise HotStateLostError(self.sid, f"plan version {info.plan_version}")
        plan = (info.plan_version, raw) if raw is not None else None
        self._streaming = plan is not None and info.planning == STREAMING
        if not info.started_at and plan is not None:
            return Started(state, self._adopt_fresh(state, info, plan))
        await self._take_over(state, info, plan)
        return Started(state, [])

    async def catch_up(self, state: SessionState, ports: StartPorts) -> None:
        """Bring the state read up to date through the collaborators wired over it."""
        ports.cancel.looked()  # the read looked at the cancel field
        if self._first_owner:
            ports.scheduling.first_owner()
        ports.deliberation.restore(state.info.deliberation)
        ports.usage.restore(state.info.llm_usage)
        if self._taken_over:
            await self._reconcile_usage(state)
        if self._unplanned and state.outcome is None:
            # cancelled before planning: nothing ran, nothing to undo
            await ports.plan_goal(ports.streamed())
        if self._streaming and state.outcome is None:
            await ports.streamed().resume()  # plan the rest
        log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)
        await ports.usage.check()
        if state.outcome is None:
            await self._settle_recorded(state, ports)
        if self._may_have_pending():
            await ports.events.apply(await self.take_over_pending(state))

    async def started(self, flush: Callable[[], Awaitable[None]]) -> None:
        """After the first turn's dispatch, before the first checkpoint: the start slot is
        given back, the ops no write carried yet are written (``flush``), the claim is
        committed (the record's rows are fenced by it) and the session hash says running."""
        await self._slot.aclose()
        await flush()
        claiming, self._claiming = self._claiming, None
        if claiming is not None:
            await claiming

    async def close(self) -> None:
        """The loop stops: the start slot is given back, a claim in flight is cancelled."""
        await self._slot.aclose()
        if self._claiming is not None:
            self._claiming.cancel()
            await asyncio.gather(self._claiming, return_exceptions=True)

    async def take_over_pending(self, state: SessionState) -> list[Entry]:
        """Events a former owner left unacknowledged; poison ones go to the dead letters."""
        store, sid = self.store, self.sid
        entries = await store.claim_pending(sid, self.ctx.name)
        counts = await store.delivery_counts(sid, [e for e, _ in entries])
        limit = self.ctx.settings.max_deliveries
        dead = [(e, f) for e, f in entries if counts.get(e, 0) > limit]
        if dead:
            log.error(
                "session=%s ALERT: %d event(s) delivered more than %d times moved to %s",
                sid,
                len(dead),
                limit,
                store.keys.deadletter,
            )
            await store.dead_letter(sid, dead, cause=f"delivered more than {limit} times")
            await store.note_progress(sid, "dead_letter", count=len(dead))
            record_events(state, dead)
        return [(e, f) for e, f in entries if counts.get(e, 0) <= limit]

    def _adopt_fresh(
        self, state: SessionState, info: SessionRecord, plan: tuple[int, str]
    ) -> list[WriteOp]:
        """A session nobody owned before, with its plan, starts without waiting: its claim
        is grouped with others' in the background (awaited by :meth:`started`, before
        its first checkpoint), and ``running`` is returned for its first fenced write."""
        # First: a bad plan leaves nothing begun. The limits' walk only for a text the
        # producer did not say it validated (a plan written by anything else).
        fields = self.taken.fields if self.taken is not None else {}
        checked = plan[0] == 1 and plan_checked(fields, plan[1])
        parsed = load_stored_plan(plan[1], checked=checked)
        self._first_owner = True
        started = time.time()
        self._claiming = asyncio.create_task(self._claim_or_adopt(state, plan))
        self._restore(state, info, started)
        state.use_plan(parsed)
        self._fill_in(state)
        return [self._running(started)]

    async def _take_over(
        self, state: SessionState, info: SessionRecord, plan: tuple[int, str] | None
    ) -> None:
        """Claim the session (a first owner's without its plan, or a takeover), note it
        running, and read what happened so far; a goal without a plan is left to plan."""
        self._first_owner = not info.started_at
        started = info.started_at or time.time()
        await self._claim_or_adopt(state, plan)
        await self.store.write(self.sid, self.epoch, [self._running(started)])
        self._restore(state, info, started)
        if plan is None:
            self._unplanned = True
            return
        state.use_plan(Plan.model_validate_json(plan[1]))
        if info.started_at:  # taken before: read what happened so far
            LEASE_TAKEOVERS.inc()
            state.states = await self.store.steps(self.sid, state.steps)
            self._taken_over = True
        self._fill_in(state)

    def _running(self, started: float) -> WriteOp:
        """The session hash's write that says the session runs (since ``started``)."""
        return (
            "HSET",
            self.store.keys.session(self.sid),
            ["status", "running", "started_at", started],
        )

    @staticmethod
    def _fill_in(state: SessionState) -> None:
        """Steps not read from the hash start pending, a fork's carried over from its
        parent (session/carried.py)."""
        for step_id in state.steps:
            state.states.setdefault(step_id, StepState())
        carry_in(state)
        state.reindex()

    @staticmethod
    def _restore(state: SessionState, info: SessionRecord, started: float) -> None:
        """The session record (running since ``started``) and its approvals; the
        deliberation's memory and LLM usage in it are restored by the catch-up."""
        state.info = info.model_copy(
            update={"started_at": started, "status": SessionStatus.RUNNING}
        )
        state.approved = set(info.approved)

    async def _reconcile_usage(self, state: SessionState) -> None:
        """A takeover counts what the ledger recorded (calls its former owner, or a worker,
        made and never reported in the session hash)."""
        record = self.ctx.record
        if record is None:
            return
        recorded = await self.ctx.sql(lambda: record.usage_of(self.sid))
        reconcile_recorded(state, recorded)

    async def _read_session(self, state: SessionState) -> tuple[SessionRecord, str | None]:
        """The session hash and the plan version it runs; a cancel is noted first."""
        taken, store = self.taken, self.store
        if taken is not None and taken.fields:
            if taken.loaded is not None:  # shared by the batch: this loop's stop is its own
                await asyncio.shield(taken.loaded)
            # Read with the lease, which is refused to an ended session.
            reason = taken.fields.get(CANCEL_FIELD)
            if reason is not None:
                state.end(SessionStatus.CANCELLED, reason or "cancelled by user")
            return SessionRecord.from_fields(self.sid, taken.fields), taken.plan_json
        await self._refuse_ended()
        await read_cancel(store, state)
        info = await store.session(self.sid)
        if info is None:
            raise SessionError("session has no hot state", session_id=self.sid)
        await store.ensure_groups(self.sid)
        raw = await store.plan_json(self.sid, info.plan_version) if info.plan_version else None
        return info, raw

    async def _refuse_ended(self) -> None:
        """Ended is final: an ended session leaves the active set and is not loaded."""
        status = await self.store.session_field(self.sid, "status")
        if status and SessionStatus(status).ended:
            await self.store.leave_active(self.sid)
            raise SessionEndedError(self.sid, status)

    def _may_have_pending(self) -> bool:
        """Whether a former consumer may have left events unacknowledged: unless the batch
        that took the session counted none (a session never owned before has none)."""
        return self.taken is None or self.taken.pending is None or self.taken.pending > 0

    async def _claim_or_adopt(self, state: SessionState, plan: tuple[int, str] | None) -> None:
        try:
            await claim_session(self.ctx, state, plan)
        except SessionEndedError:
            # its owner died between the SQL and Redis ends
            row = await self.ctx.sql(lambda: self.ctx.record.session(self.sid))
            await adopt_recorded_ending(self.store, self.sid, self.epoch, row)
            raise

    async def _settle_recorded(self, state: SessionState, ports: StartPorts) -> None:
        """Outcomes recorded while nobody watched; attempts queued but never started."""
        for step_id, st in list(state.states.items()):
            if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note != FINAL:
                await ports.outcomes.decide_failure(step_id)
            elif st.status == StepStatus.COMPLETED:
                state.dirty.add(step_id)  # it may have ended unwatched: SQL says running
            elif st.status == StepStatus.RUNNING and not st.started_at:
                # Queued, but perhaps taken by a worker that died before claiming it (the
                # broker would give it back only after its visibility timeout). A second
                # copy costs nothing: the claim runs one.
                await ports.scheduling.resend(step_id)
