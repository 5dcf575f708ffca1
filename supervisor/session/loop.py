"""One session's loop: start, turns until the session has an outcome, finish.

1. **Start** (session/start.py): its read builds the :class:`SessionState` (fresh from what
   its batch read, or read first, or taken over) and the ops the first fenced write carries;
   the loop wires its collaborators over it; its catch-up runs through them (a goal planned,
   a streamed plan finished, outcomes recorded unwatched settled, pending events taken over).
2. **Turns**, until the session has an outcome: a cancel asked for in the session hash wins;
   dispatch ready steps (session/sending.py: the first turn's write carries the start's ops,
   and the store port sends the first writes of sessions starting together in one round
   trip), announce approvals, checkpoint to SQL in the background; wait for events and apply
   them (session/events.py: outcomes, commands, changes); run the watchdog; deliberate and
   carry out the decision (session/decisions.py); account LLM usage (session/llm_usage.py);
   check the end; review a completed round.
3. **Finish**: stop what runs, compensate if aborted or cancelled, answer, write the report
   (session/finish.py), then conclude the lessons (session/lesson_conclusion.py).

The loop holds the one :class:`SessionState`; its collaborators get it with narrow ports
(never the loop); this module composes them (:meth:`SessionRunner.wire`), runs the three parts.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import redis

from planloop.core.errors import FencedOutError, HotStateLostError, SessionEndedError
from planloop.core.llm_meter import METER
from planloop.core.models import SessionStatus
from planloop.core.redis_faults import is_redis_fault
from planloop.core.tracing import SESSION
from planloop.supervisor.io.checkpointer import Checkpointer
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.store_port import Entry
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.process.no_consumer_watch import ConsumerMonitor
from planloop.supervisor.session import record_reads
from planloop.supervisor.session.cancel_watch import CancelWatch
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.commands import Commands
from planloop.supervisor.session.decisions import Decisions, commit_decisions
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ending import Ending
from planloop.supervisor.session.events import SessionEvents
from planloop.supervisor.session.finish import finish_session
from planloop.supervisor.session.lesson_conclusion import conclude_lessons
from planloop.supervisor.session.lesson_search import search_lessons
from planloop.supervisor.session.llm_usage import LLMUsage
from planloop.supervisor.session.outcomes import Outcomes
from planloop.supervisor.session.plan_goal import announce_fallback, plan_goal
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.rounds import Rounds
from planloop.supervisor.session.sending import Scheduling
from planloop.supervisor.session.start import SessionStart, StartPorts
from planloop.supervisor.session.state import SessionState
from planloop.supervisor.session.streaming import StreamedPlanning, StreamPorts
from planloop.supervisor.session.usage_ledger import session_meter

log = logging.getLogger(__name__)


class SessionRunner:
    """Drives one session this supervisor owns at ``epoch`` (see the module's docstring)."""

    def __init__(
        self, ctx: SupervisorContext, sid: str, epoch: int, taken: Taken | None = None
    ) -> None:
        self.ctx, self.sid, self.epoch = ctx, sid, epoch
        self.start = SessionStart(ctx, sid, epoch, taken)
        self.checkpointer = Checkpointer(ctx, sid, epoch)

    def wire(self, state: SessionState) -> None:
        """Compose the collaborators over ``state`` (the start's read's, or a unit test's)."""
        ctx, sid = self.ctx, self.sid
        self.state = state
        self.io = io = SessionIO(
            state,
            ctx.store,
            ctx.settings,
            ctx.tools,
            consumer=ctx.name,
            stored_outputs=functools.partial(record_reads.stored_outputs, ctx),
            events=ctx.events,
        )
        commit = functools.partial(commit_decisions, ctx, state)
        self.changes = changes = PlanChanges(io, ctx.dispatcher.revoke, commit)
        self.deliberation = deliberation = Deliberation(
            state,
            ctx.settings,
            ctx.chat,
            ctx.tools,
            ctx.dispatcher.sensitive,
            io.load_outputs,
            fetch_lessons=(
                None
                if ctx.lessons is None
                else functools.partial(search_lessons, ctx.lessons, ctx.tools, state)
            ),
        )
        self.decisions = decisions = Decisions(ctx, io, deliberation, changes)
        outcomes = Outcomes(io, deliberation, lambda step_id: step_id in scheduling.unresolved)
        consumers = ConsumerMonitor(
            ctx.store,
            sid,
            ctx.settings,
            io.append_event,
            queue_of=lambda step_id: state.states[step_id].queue,
        )
        self.scheduling = scheduling = Scheduling(
            io, ctx.dispatcher, on_failure=outcomes.decide_failure, consumers=consumers
        )
        self.commands = Commands(io, changes, deliberation, decisions.carry_out)
        self.events = SessionEvents(
            io, outcomes, self.commands, deliberation, look_at=scheduling.next_look
        )
        # The ending's checkpoints join the next commit round; the record of the end starts
        # one at once, which sessions ending meanwhile join: a thousand ends, a few commits.
        self.ending = Ending(
            io,
            changes,
            ctx.dispatcher,
            ctx.dispatcher.sensitive,
            functools.partial(self._commit_checkpoint, hurry=False),
            functools.partial(record_reads.effects_to_undo, ctx, sid),
            functools.partial(record_reads.late_writes_to_undo, ctx, sid),
            commit_now=functools.partial(self._commit_checkpoint, hurry=True),
        )
        self.rounds = Rounds(io, changes, deliberation)
        self.cancel = cancel = CancelWatch(ctx.store, state)
        self.usage = usage = LLMUsage(io, deliberation, decisions.carry_out)
        plan = functools.partial(plan_goal, ctx, io, deliberation, self.rounds)
        self.catch_up = StartPorts(
            cancel, scheduling, deliberation, usage, self.events, outcomes, plan, self._streamed
        )

    @property
    def applying(self) -> Entry | None:
        """The event being applied, a crash's cause (none before the parts are wired)."""
        events: SessionEvents | None = self.__dict__.get("events")
        return None if events is None else events.applying

    async def begin(self) -> None:
        """1. Start: read the state, wire the collaborators over it, catch up through them;
        the ops read go with the next fenced write (the first turn's, unless the catch-up's)."""
        read = await self.start.read()
        self.wire(read.state)
        if self.ctx.record is not None:  # every LLM call of this task is charged as it arrives
            METER.set(session_meter(self.state, self.ctx.settings, self.ctx.record))
        self.io.carry(read.ops)
        await self.start.catch_up(self.state, self.catch_up)

    async def run(self) -> None:
        """Drive the session to its end, or until another supervisor fences us out."""
        SESSION.set(self.sid)  # this task's LLM spans belong to the session's trace
        try:
            await self.begin()  # 1. start
            state = self.state
            while state.outcome is None and await self._send():  # 2. turns
                await self._turn()
            assert state.outcome is not None  # turns stop on an outcome, and only then
            await self._finish(*state.outcome)  # 3. finish
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
                *(self.sid, self.epoch, type(exc).__name__, exc),
            )
        finally:
            await self.start.close()
            await self.checkpointer.close()

    async def _send(self) -> bool:
        """A turn's first half: a cancel wins, then dispatch what is ready and checkpoint.
        False when the session has an outcome and the turn stops here."""
        if self.cancel.never_looked:  # a cancel asked for before it loaded: nothing is sent
            await self.cancel.check()
        if self.state.outcome is not None:
            return False
        await self.scheduling.dispatch_ready()
        await self.commands.announce_approvals()
        await self.start.started(self.io.flush)  # the start ends with its first dispatch
        # Checkpoint after dispatching, in the background: the next steps never wait on SQL.
        self._checkpoint()
        self.checkpointer.raise_if_failed()
        await self.cancel.check()  # once a second: after the dispatch, not before it
        return self.state.outcome is None

    async def _turn(self) -> None:
        """A turn's second half: events applied, the watchdog, deciding, the end checked."""
        entries = await self.events.wait()
        await self.ctx.admission.defer()  # sessions starting go first
        await self.events.apply(entries)
        await self.events.reclaim_idle()
        await self.scheduling.watchdog()
        await self.decisions.think()
        await self.usage.check()
        self.decisions.check_end()
        await self.rounds.review()  # with an LLM, a completed round is judged

    async def _finish(self, status: SessionStatus, reason: str) -> None:
        """Stop what runs, compensate, answer, write the report, then reflect (lessons)."""
        await self.start.started(self.io.flush)
        await self.ctx.admission.defer()

        async def conclude(compensations: list[dict[str, Any]]) -> dict[str, Any]:
            return await self.rounds.conclusion(status, reason, compensations)

        await finish_session(self.ending, status, reason, conclude=conclude)
        await conclude_lessons(self.ctx, self.state, self.deliberation, self.rounds)

    def _streamed(self) -> StreamedPlanning:
        """A streamed first plan's planning, and the loop's steps it runs as the plan arrives."""
        ports = StreamPorts(
            self.ctx,
            self.io,
            self.changes,
            self.scheduling,
            apply=self.events.apply,
            checkpoint=self._checkpoint,
            announce_fallback=functools.partial(announce_fallback, self.io),
        )
        return StreamedPlanning(ports)

    async def _commit_checkpoint(self, *, hurry: bool) -> None:
        """Checkpoint, committed in a round that starts now (``hurry``: no linger, no
        deferral) or with whatever round it joins."""
        self._checkpoint()
        await self.checkpointer.flush(hurry=hurry)

    def _checkpoint(self) -> None:
        self.checkpointer.submit(*self.state.take_checkpoint())
