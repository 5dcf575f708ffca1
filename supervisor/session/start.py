"""How a session starts: the one path from a lease taken to the loop's first turn.

:meth:`SessionStart.run` returns :class:`Started`: the session's state, and the ops its first
fenced write carries. It dispatches nothing: the loop's first turn does, through the store
port, which sends the first writes of many sessions starting together in one round trip.

1. **Fresh**: a session never owned, with its plan. Taken in a batch (nothing pending, no
   cancel, not streaming: ``batch_start.starts_from_batch``), it starts from what the batch
   read, with no round trip of its own; otherwise it is read first. Its SQL claim is grouped
   with others' in the background, and ``running`` is one of the ops returned (it goes with
   the first dispatch).
2. **Takeover**: a session owned before is claimed in SQL, noted running, and its step states
   and LLM usage read; a goal without a plan is planned first. Outcomes recorded while nobody
   watched are settled and attempts never started re-sent.
3. **Streamed resume**: whichever way it was loaded, a session whose former owner died while
   its first plan streamed has the planner write the rest.

Then events a former owner left unacknowledged are taken over. A session not started from its
batch holds a start slot (supervisor/process/admission.py) until its first turn has
dispatched (:meth:`SessionStart.started`).
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
from planloop.supervisor.session.cancel_watch import CancelWatch
from planloop.supervisor.session.carried import carry_in
from planloop.supervisor.session.claim import claim_session
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.finish import adopt_recorded_ending
from planloop.supervisor.session.llm_usage import LLMUsage
from planloop.supervisor.session.ports import CANCEL_FIELD, SessionIO, read_event
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
    """A session brought to its loop's first turn: its state, and the ops its first fenced
    write carries (a fresh session's ``running``, sent with its first dispatch)."""

    state: SessionState
    ops: list[WriteOp]


@dataclass(frozen=True)
class StartPorts:
    """The loop's steps a start runs: apply events, decide a failure, account LLM usage,
    plan a goal, and the streamed planning a resume continues."""

    apply: Callable[[list[Entry]], Awaitable[None]]
    decide_failure: Callable[[str], Awaitable[None]]
    usage: LLMUsage
    plan_goal: Callable[[], Awaitable[None]]
    streamed: Callable[[], StreamedPlanning]


class SessionStart:
    """Brings one session's state from its lease to the loop's first turn."""

    def __init__(
        self,
        ctx: SupervisorContext,
        io: SessionIO,
        taken: Taken | None,
        scheduling: Scheduling,
        deliberation: Deliberation,
        cancel: CancelWatch,
        ports: StartPorts,
    ) -> None:
        self.ctx = ctx
        self.io = io
        self.state = io.state
        self.store = io.store
        self.taken = taken  # what the lease's pipeline read for the loop to start from
        self.scheduling = scheduling
        self.deliberation = deliberation
        self.cancel = cancel
        self.ports = ports
        self._claiming: asyncio.Task[None] | None = None  # a first owner's claim, in flight
        self._slot = contextlib.AsyncExitStack()  # the start slot, up to the first dispatch

    @property
    def sid(self) -> str:
        return self.state.sid

    async def run(self) -> Started:
        """Bring the session to its first turn (see the module's docstring)."""
        # Up to its first dispatch, a session taken with its plan holds a start slot: it
        # goes before the bookkeeping of sessions already running (admission.py). One
        # planning its goal waits on the LLM instead, and holds none; one its batch starts
        # is covered by the batch's.
        planned = self.taken is not None and self.taken.plan_version > 0
        if planned and not starts_from_batch(self.taken):
            await self._slot.enter_async_context(self.ctx.admission.start())
        state = self.state
        await self._load()
        await self.ports.usage.check()
        if state.outcome is None:
            await self._settle_recorded()
        if self._may_have_pending():
            await self.ports.apply(await self.take_over_pending())
        # What no write of the start carried yet (a fresh session's running, kept back by
        # its adoption): the first turn's dispatch sends it.
        return Started(state, self.io.take_deferred([]))

    async def started(self) -> None:
        """After the first turn's dispatch, before the first checkpoint: the start slot is
        given back, the claim is committed (the record's rows are fenced by it) and the
        session hash says running."""
        await self._slot.aclose()
        await self.io.flush()
        claiming, self._claiming = self._claiming, None
        if claiming is not None:
            await claiming

    async def close(self) -> None:
        """The loop stops: the start slot is given back, a claim in flight is cancelled."""
        await self._slot.aclose()
        if self._claiming is not None:
            self._claiming.cancel()
            await asyncio.gather(self._claiming, return_exceptions=True)

    async def take_over_pending(self) -> list[Entry]:
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
            record_events(self.state, dead)
        return [(e, f) for e, f in entries if counts.get(e, 0) <= limit]

    async def _load(self) -> None:
        """Read the session (from what its lease's pipeline read, when taken in a batch),
        claim it in SQL and note it running: adopted fresh or taken over."""
        info, raw = await self._read_session()
        if not info.started_at:  # never owned: what the producer checks, checked again
            fields = self.taken.fields if self.taken is not None else {}
            refuse_bad_input(info, raw, fields, self.ctx.settings)
        self.state.info = info
        if info.plan_version and raw is None:
            # Wiped between the two reads: claiming now would record a session without
            # its plan, which no rebuild could ever restore.
            raise HotStateLostError(self.sid, f"plan version {info.plan_version}")
        plan = (info.plan_version, raw) if raw is not None else None
        if not info.started_at and plan is not None:
            self._adopt_fresh(info, plan)
        else:
            await self._take_over(info, plan)
        if plan is not None and info.planning == STREAMING and self.state.outcome is None:
            # its former owner died while the first plan streamed: plan the rest
            await self.ports.streamed().resume()
        self._taken_by()

    def _adopt_fresh(self, info: SessionRecord, plan: tuple[int, str]) -> None:
        """A session nobody owned before, with its plan, starts without waiting: its claim
        is grouped with others' in the background (awaited by :meth:`started`, before
        its first checkpoint), and ``running`` goes with its first fenced write."""
        # First: a bad plan leaves nothing begun. The limits' walk only for a text the
        # producer did not say it validated (a plan written by anything else).
        fields = self.taken.fields if self.taken is not None else {}
        checked = plan[0] == 1 and plan_checked(fields, plan[1])
        parsed = load_stored_plan(plan[1], checked=checked)
        self.scheduling.first_owner()
        started = time.time()
        self._claiming = asyncio.create_task(self._claim_or_adopt(plan))
        self.io.defer_session("status", "running", "started_at", started)
        self._restore(info, started)
        self.state.use_plan(parsed)
        self._fill_in()

    async def _take_over(self, info: SessionRecord, plan: tuple[int, str] | None) -> None:
        """Claim the session (a first owner's without its plan, or a takeover), note it
        running, and read what happened so far; a goal without a plan is planned."""
        state = self.state
        if not info.started_at:
            self.scheduling.first_owner()
        started = info.started_at or time.time()
        await self._claim_or_adopt(plan)
        await self.io.write_session("status", "running", "started_at", started)
        self._restore(info, started)
        if plan is None:
            if state.outcome is None:  # cancelled before planning: nothing ran, nothing to undo
                await self.ports.plan_goal()
            return
        state.use_plan(Plan.model_validate_json(plan[1]))
        if info.started_at:  # taken before: read what happened so far
            LEASE_TAKEOVERS.inc()
            state.states = await self.store.steps(self.sid, state.steps)
            await self._reconcile_usage()
        self._fill_in()

    def _fill_in(self) -> None:
        """Steps not read from the hash start pending, a fork's carried over from its
        parent (session/carried.py)."""
        state = self.state
        for step_id in state.steps:
            state.states.setdefault(step_id, StepState())
        carry_in(state)
        state.reindex()

    def _restore(self, info: SessionRecord, started: float) -> None:
        """The loop's memory from the session hash (deliberation, usage, approvals)."""
        state = self.state
        state.info = info.model_copy(
            update={"started_at": started, "status": SessionStatus.RUNNING}
        )
        self.deliberation.restore(info.deliberation)
        self.ports.usage.restore(info.llm_usage)
        state.approved = set(info.approved)

    async def _reconcile_usage(self) -> None:
        """A takeover counts what the ledger recorded (calls its former owner, or a worker,
        made and never reported in the session hash)."""
        record = self.ctx.record
        if record is None:
            return
        recorded = await self.ctx.sql(lambda: record.usage_of(self.sid))
        reconcile_recorded(self.state, recorded)

    async def _read_session(self) -> tuple[SessionRecord, str | None]:
        """The session hash and the plan version it runs; a cancel is noted first."""
        taken, store = self.taken, self.store
        if taken is not None and taken.fields:
            if taken.loaded is not None:  # shared by the batch: this loop's stop is its own
                await asyncio.shield(taken.loaded)
            # Read with the lease, which is refused to an ended session.
            reason = taken.fields.get(CANCEL_FIELD)
            if reason is not None:
                self.state.end(SessionStatus.CANCELLED, reason or "cancelled by user")
            self.cancel.looked()
            return SessionRecord.from_fields(self.sid, taken.fields), taken.plan_json
        await self._refuse_ended()
        await self.cancel.check()
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

    async def _claim_or_adopt(self, plan: tuple[int, str] | None) -> None:
        try:
            await claim_session(self.ctx, self.state, plan)
        except SessionEndedError:
            # its owner died between the SQL and Redis ends
            row = await self.ctx.sql(lambda: self.ctx.record.session(self.sid))
            await adopt_recorded_ending(self.store, self.sid, self.state.epoch, row)
            raise

    async def _settle_recorded(self) -> None:
        """Outcomes recorded while nobody watched; attempts queued but never started."""
        for step_id, st in list(self.state.states.items()):
            if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note != FINAL:
                await self.ports.decide_failure(step_id)
            elif st.status == StepStatus.COMPLETED:
                self.state.dirty.add(step_id)  # it may have ended unwatched: SQL says running
            elif st.status == StepStatus.RUNNING and not st.started_at:
                # Queued, but perhaps taken by a worker that died before claiming it (the
                # broker would give it back only after its visibility timeout). A second
                # copy costs nothing: the claim runs one.
                await self.scheduling.resend(step_id)

    def _taken_by(self) -> None:
        log.info("session=%s epoch=%d taken by %s", self.sid, self.state.epoch, self.ctx.name)
