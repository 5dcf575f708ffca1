"""One session's loop: dispatch ready steps, consume events, decide, checkpoint, acknowledge."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import redis
from sqlalchemy.exc import SQLAlchemyError

from planloop.core.errors import (
    FencedOutError,
    HotStateLostError,
    LLMBudgetSpentError,
    LLMError,
    PlanError,
    SessionEndedError,
    SessionError,
)
from planloop.core.hot_state import plan_checked
from planloop.core.lesson_freshness import served_versions
from planloop.core.llm_meter import METER
from planloop.core.metrics import LEASE_TAKEOVERS
from planloop.core.models import (
    ErrorKind,
    Event,
    EventType,
    SessionRecord,
    SessionStatus,
    Severity,
    StepState,
    StepStatus,
)
from planloop.core.redis_faults import is_redis_fault
from planloop.core.step_commands import StepCommand, step_command_refusal
from planloop.core.tracing import SESSION
from planloop.planner.llm import streams_plans
from planloop.planner.plan import Plan, Step, load_stored_plan
from planloop.planner.react import usages_of
from planloop.supervisor.io.checkpointer import Checkpointer
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.store_port import Entry, SessionStorePort, WriteOp
from planloop.supervisor.io.stream_flags import STREAMING
from planloop.supervisor.process.batch_start import can_begin
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.process.input_refusal import refuse_bad_input
from planloop.supervisor.process.no_consumer_watch import ConsumerMonitor
from planloop.supervisor.session.agent_undo import AgentEffect, agent_effects, late_writes
from planloop.supervisor.session.broken import dependency_broken
from planloop.supervisor.session.carried import carry_in
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.claim import claim_session
from planloop.supervisor.session.decision_log import record_decision, record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ending import Ending
from planloop.supervisor.session.failures import settle_failure
from planloop.supervisor.session.finish import adopt_recorded_ending, finish_session
from planloop.supervisor.session.goal_routing import (
    REACT_FALLBACK,
    FirstPlan,
    first_plan,
    route_goal,
)
from planloop.supervisor.session.lesson_search import search_lessons
from planloop.supervisor.session.lesson_story import ended_session
from planloop.supervisor.session.lessons import BAD_ENDINGS
from planloop.supervisor.session.ports import CANCEL_FIELD, SessionIO, describe_error, read_event
from planloop.supervisor.session.rounds import Rounds
from planloop.supervisor.session.schedule import wait_ms
from planloop.supervisor.session.sending import Scheduling
from planloop.supervisor.session.state import FINAL, SessionState, attempt_row, session_end
from planloop.supervisor.session.streaming import StreamedPlanning, StreamPorts
from planloop.supervisor.session.usage_ledger import (
    count_reported,
    reconcile_recorded,
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
CANCEL_CHECK_INTERVAL_S = 1.0  # the session hash's cancel field, looked at this often


def record_events(state: SessionState, entries: list[Entry]) -> None:
    """Record (not apply) ``entries`` with the next checkpoint; unreadable ones are left out."""
    for entry_id, fields in entries:
        try:
            state.batch.events.append((entry_id, read_event(fields)))
        except (ValueError, KeyError):
            continue


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
        self.taken = taken  # what the lease's pipeline read for the loop to start from
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
        self._next_idle_claim = time.monotonic() + IDLE_CLAIM_INTERVAL_S
        self._next_cancel_check = 0.0
        self._claiming: asyncio.Task[None] | None = None  # a first owner's claim, in flight
        self._first_owner = False  # nobody owned the session before (no takeover to do)
        self._begun = False  # started by its batch (begin), not by run
        self._first_write: asyncio.Future[None] | None = None  # the batch's, for begin's ops
        self.applying: tuple[str, dict[str, str]] | None = None
        self._usage_written: dict[str, list[int]] = {}  # llm_usage as the hash has it
        self._budget_noted = False  # a spent LLM budget was decided on after a call

    @property
    def sid(self) -> str:
        return self.state.sid

    def _stream_ports(self) -> StreamPorts:
        """What a streamed first plan's planning uses of this loop while the plan arrives."""
        return StreamPorts(
            self.ctx,
            self.io,
            self.changes,
            self.scheduling,
            apply=self._apply,
            checkpoint=self._checkpoint,
            announce_fallback=self._announce_fallback,
        )

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
            # Up to its first dispatch, a session taken with its plan holds a start slot:
            # it goes before the bookkeeping of sessions already running (admission.py).
            # One planning its goal waits on the LLM instead, and holds none.
            planned = self.taken is not None and self.taken.plan_version > 0
            if self._begun:  # started by its batch (begin): up to its first dispatch
                await self._begun_start()
            else:
                await self._start(planned)
            while state.outcome is None:
                await self._check_cancel()  # before anything new is dispatched
                if state.outcome is not None:
                    break
                await self.scheduling.dispatch_ready()
                await self._announce_approvals()
                await self._started()
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
                await self._check_llm_budget()
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
            if self._claiming is not None:
                self._claiming.cancel()
                await asyncio.gather(self._claiming, return_exceptions=True)
            await self.checkpointer.close()

    async def _start(self, planned: bool) -> None:
        """Load the session, settle what happened unwatched, and dispatch what is ready."""
        state = self.state
        async with self.ctx.admission.start() if planned else contextlib.nullcontext():
            await self._load()
            await self._check_llm_budget()
            if state.outcome is None:
                await self._settle_recorded()
            if self._may_have_pending():
                await self._apply(await self.take_over_pending())
            if state.outcome is None:
                await self.scheduling.dispatch_ready()

    async def _begun_start(self) -> None:
        """A session its batch began: a fresh one (nothing recorded to settle, no event
        pending), whose first dispatch the batch sent, or that still needs it."""
        written, self._first_write = self._first_write, None
        if written is not None:
            # Shielded: the batch's write goes on (and is retrieved) if this loop stops.
            await asyncio.shield(written)
            return
        async with self.ctx.admission.start():
            await self.scheduling.dispatch_ready()

    async def _wait_for_events(self) -> list[Entry]:
        """The session's next events: wait until one arrives or the next timer is due."""
        return await self.io.read_events(
            count=self.settings.event_batch, block_ms=wait_ms(self.state, time.time())
        )

    async def _finish(self, status: SessionStatus, reason: str) -> None:
        """Stop what runs, compensate, answer, write the report, then reflect (lessons)."""
        await self._started()
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

    async def _load(self) -> None:
        """Read the session (from what its lease's pipeline read, when taken in a batch),
        claim it in SQL and note it running.

        A session nobody owned before, with its plan, starts without waiting: its claim
        is grouped with others' in the background (awaited by :meth:`_started`, before
        its first checkpoint), and ``running`` goes with its first fenced write.
        """
        state, store = self.state, self.store
        info, raw = await self._read_session()
        if not info.started_at:  # never owned: what the producer checks, checked again
            fields = self.taken.fields if self.taken is not None else {}
            refuse_bad_input(info, raw, fields, self.settings)
        state.info = info
        if info.plan_version and raw is None:
            # Wiped between the two reads: claiming now would record a session without
            # its plan, which no rebuild could ever restore.
            raise HotStateLostError(self.sid, f"plan version {info.plan_version}")
        plan = (info.plan_version, raw) if raw is not None else None
        self._first_owner = not info.started_at
        if self._first_owner and plan is not None:
            self._adopt_fresh(info, plan)
            if info.planning == STREAMING and state.outcome is None:
                # its former owner died while the first plan streamed: plan the rest
                await StreamedPlanning(self._stream_ports()).resume()
            log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)
            return
        if self._first_owner:
            self.scheduling.first_owner()
        started = info.started_at or time.time()
        await self._claim_or_adopt(plan)
        await self.io.write_session("status", "running", "started_at", started)
        self._restore(info, started)
        if info.plan_version == 0:
            if state.outcome is None:  # cancelled before planning: nothing ran, nothing to undo
                await self._plan_goal()
        else:
            assert raw is not None  # checked before the claim
            state.use_plan(Plan.model_validate_json(raw))
            if info.started_at:  # taken before: read what happened so far
                LEASE_TAKEOVERS.inc()
                state.states = await store.steps(self.sid, state.steps)
                await self._reconcile_usage()
            for step_id in state.steps:
                state.states.setdefault(step_id, StepState())
            carry_in(
                state
            )  # a fork's steps carried over from its parent (supervisor/session/carried.py)
            state.reindex()
            if info.planning == STREAMING and state.outcome is None:
                # its former owner died while the first plan streamed: plan the rest
                await StreamedPlanning(self._stream_ports()).resume()
        log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)

    def begin(self) -> list[WriteOp] | None:
        """Start a session taken in a batch, without a round trip of its own: what
        :meth:`run` would do up to its first dispatch, from what the batch read
        (``Taken``: the session hash, its plan, no pending events). Returns the ops of the
        first fenced write (the session marked running and the ready steps queued) for
        the batch to send with the others' (:meth:`first_write`), or None when the session
        does not start that way (see ``batch_start.can_begin``; then :meth:`run` loads it).
        """
        taken = self.taken
        if taken is None or not can_begin(taken):
            return None
        assert taken.plan_json is not None  # can_begin checked it
        info = SessionRecord.from_fields(self.sid, taken.fields)
        refuse_bad_input(info, taken.plan_json, taken.fields, self.settings)
        self.state.info = info
        self._next_cancel_check = time.monotonic() + CANCEL_CHECK_INTERVAL_S
        self._adopt_fresh(info, (info.plan_version, taken.plan_json))
        self._begun = True
        log.info("session=%s epoch=%d taken by %s", self.sid, self.epoch, self.ctx.name)
        ops = self.scheduling.dispatch_now()
        if ops is None:  # a step needs a round trip first: the loop dispatches it
            return None
        return self.io.take_deferred(ops)

    def first_write(self, written: asyncio.Future[None]) -> None:
        """The batch sends this session's first write (:meth:`begin`'s ops): ``written``
        settles with its reply, which the loop awaits before going on."""
        self._first_write = written

    def _adopt_fresh(self, info: SessionRecord, plan: tuple[int, str]) -> None:
        """A session nobody owned before, with its plan, starts without waiting: its claim
        is grouped with others' in the background (awaited by :meth:`_started`, before
        its first checkpoint), and ``running`` goes with its first fenced write."""
        state = self.state
        # First: a bad plan leaves nothing begun. The limits' walk only for a text the
        # producer did not say it validated (a plan written by anything else).
        fields = self.taken.fields if self.taken is not None else {}
        checked = plan[0] == 1 and plan_checked(fields, plan[1])
        parsed = load_stored_plan(plan[1], checked=checked)
        self._first_owner = True
        self.scheduling.first_owner()
        started = time.time()
        self._claiming = asyncio.create_task(self._claim_or_adopt(plan))
        self.io.defer_session("status", "running", "started_at", started)
        self._restore(info, started)
        state.use_plan(parsed)
        for step_id in state.steps:
            state.states.setdefault(step_id, StepState())
        carry_in(
            state
        )  # a fork's steps carried over from its parent (supervisor/session/carried.py)
        state.reindex()

    def _restore(self, info: SessionRecord, started: float) -> None:
        """The loop's memory from the session hash (deliberation, usage, approvals)."""
        state = self.state
        state.info = info.model_copy(
            update={"started_at": started, "status": SessionStatus.RUNNING}
        )
        self.deliberation.restore(info.deliberation)
        state.llm_usage = {model: list(tokens) for model, tokens in info.llm_usage.items()}
        self._usage_written = {model: list(tokens) for model, tokens in info.llm_usage.items()}
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
            self._next_cancel_check = time.monotonic() + CANCEL_CHECK_INTERVAL_S
            return SessionRecord.from_fields(self.sid, taken.fields), taken.plan_json
        await self._refuse_ended()
        await self._check_cancel()
        info = await store.session(self.sid)
        if info is None:
            raise SessionError("session has no hot state", session_id=self.sid)
        await store.ensure_groups(self.sid)
        raw = await store.plan_json(self.sid, info.plan_version) if info.plan_version else None
        return info, raw

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
            await adopt_recorded_ending(self.store, self.sid, self.epoch, row)
            raise

    async def _started(self) -> None:
        """Before the first checkpoint: the claim is committed (the record's rows are
        fenced by it) and the session hash says running."""
        await self.io.flush()
        claiming, self._claiming = self._claiming, None
        if claiming is not None:
            await claiming

    async def _refuse_ended(self) -> None:
        """Ended is final: an ended session leaves the active set and is not loaded."""
        status = await self.store.session_field(self.sid, "status")
        if status and SessionStatus(status).ended:
            await self.store.leave_active(self.sid)
            raise SessionEndedError(self.sid, status)

    async def _check_cancel(self) -> None:
        """A cancel asked for in the session hash wins over everything not yet done.

        Looked at once a second at most: the cancel's event on the stream ends the
        session at once; the field is for a loop that cannot get that far.
        """
        now = time.monotonic()
        if self.state.outcome is not None or now < self._next_cancel_check:
            return
        self._next_cancel_check = now + CANCEL_CHECK_INTERVAL_S
        reason = await self.store.session_field(self.sid, CANCEL_FIELD)
        if reason is not None:
            self.state.outcome = (SessionStatus.CANCELLED, reason or "cancelled by user")

    async def _plan_goal(self) -> None:
        """A goal without a plan: the LLM planner writes version 1 (recorded, never redone),
        or, when the router finds that no tool is needed, the session ends answered."""
        state = self.state
        if self.ctx.chat is None:
            state.outcome = (
                SessionStatus.FAILED,
                "the session has a goal but no plan, and no LLM is configured",
            )
            return
        spent = self.deliberation.llm_budget_spent()
        if spent is not None:  # a takeover of a session that spent it before it had a plan
            state.outcome = (SessionStatus.ABORTED, f"{spent}: not planned")
            return
        options, chat, goal = state.info.options, self.ctx.chat, state.info.goal
        tools = self.ctx.tools.subset(options.tools) if options.tools else self.ctx.tools
        lessons = await self.deliberation.advice()
        route = await asyncio.to_thread(route_goal, chat, tools, goal, options.mode, lessons)
        record_usage(state.batch, route.usages)
        if route.mode == "answer":  # no tool needed: the summarizer answers, no plan
            await self.store.note_progress(self.sid, "answer_directly", reason=route.reason)
            self.rounds.answer_directly(route.reason)
            return
        spent = self.deliberation.llm_budget_spent() if route.mode == "plan" else None
        if spent is not None:
            state.outcome = (SessionStatus.ABORTED, f"{spent}: not planned")
            return
        streamed = StreamedPlanning(self._stream_ports())

        def plan(on_plan: Callable[[Plan], None] | None) -> FirstPlan:
            return first_plan(
                chat,
                tools,
                goal,
                list(self.deliberation.constraints),
                mode=route.mode,
                max_repairs=self.settings.plan_max_repairs,
                lessons=lessons,
                on_plan=on_plan,
            )

        try:
            if route.mode == "plan" and streams_plans(chat):
                found = await streamed.run(plan)
                if found is None:  # cancelled while planning
                    return
                first = found
            else:
                first = await asyncio.to_thread(plan, None)
        except LLMBudgetSpentError as exc:  # spent by the router or a repair: as above
            state.outcome = (SessionStatus.ABORTED, f"{exc.spent}: not planned")
            return
        except (PlanError, LLMError) as exc:
            state.outcome = (SessionStatus.FAILED, f"planning failed: {exc}")
            return
        record_usage(state.batch, first.usages)
        if first.fallback_error:
            await self._announce_fallback(first.fallback_error)
        await streamed.finish(first)

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

    async def _announce_fallback(self, error: str) -> None:
        """Say on the event and progress streams that an agent step replaces a failed plan."""
        text = f"planning failed after its repairs ({error}); running one agent step instead"
        notice = {"notice": REACT_FALLBACK}
        await self.io.append_event(
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                severity=Severity.WARNING,
                description=text,
                payload=notice,
            )
        )
        await self.store.note_progress(self.sid, REACT_FALLBACK, reason=text)

    async def _settle_recorded(self) -> None:
        for step_id, st in list(self.state.states.items()):
            if st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note != FINAL:
                await self._decide_failure(step_id)
            elif st.status == StepStatus.COMPLETED:
                self.state.dirty.add(step_id)  # it may have ended unwatched: SQL says running
            elif st.status == StepStatus.RUNNING and not st.started_at:
                # Queued, but perhaps taken by a worker that died before claiming it (the
                # broker would give it back only after its visibility timeout). A second
                # copy costs nothing: the claim runs one.
                await self.scheduling.resend(step_id)

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

    async def take_over_pending(self) -> list[Entry]:
        """Events a former owner left unacknowledged; poison ones go to the dead letters."""
        store = self.store
        entries = await store.claim_pending(self.sid, self.ctx.name)
        counts = await store.delivery_counts(self.sid, [e for e, _ in entries])
        limit = self.settings.max_deliveries
        dead = [(e, f) for e, f in entries if counts.get(e, 0) > limit]
        if dead:
            log.error(
                "session=%s ALERT: %d event(s) delivered more than %d times moved to %s",
                self.sid,
                len(dead),
                limit,
                store.keys.deadletter,
            )
            await store.dead_letter(self.sid, dead, cause=f"delivered more than {limit} times")
            await store.note_progress(self.sid, "dead_letter", count=len(dead))
            record_events(self.state, dead)
        return [(e, f) for e, f in entries if counts.get(e, 0) <= limit]

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

    async def _check_llm_budget(self) -> None:
        """After LLM calls: keep the running totals in the session hash (a takeover goes on
        counting from them), and decide on a budget the calls just spent like on a spent
        re-plan budget (a forced ABORT, or a wait for a person)."""
        state = self.state
        usage = state.fold_usage()
        if usage == self._usage_written:
            return
        await self.io.write_session("llm_usage", usage)
        self._usage_written = {model: list(tokens) for model, tokens in usage.items()}
        spent = self.deliberation.llm_budget_spent()
        if spent is None or state.outcome is not None or self._budget_noted:
            return
        self._budget_noted = True
        notice = Event(
            type=EventType.EXTERNAL_SIGNAL,
            severity=Severity.CRITICAL,
            description=spent,
            payload={"budget": "llm"},
        )
        await self._carry_out(Decision(self.deliberation.budget_verdict(spent), [notice], "budget"))

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
