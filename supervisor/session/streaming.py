"""A first plan installed while its reply streams: early dispatch, and a takeover mid-stream.

The planner runs on a thread (its reply streamed, planner/first_plans.py ``plan_streamed``) and
hands over the growing valid prefix of the plan. The session's loop meanwhile installs that
prefix through the ordinary plan-install path (a new plan version, step hashes, the SQL record,
all fenced), dispatches what is ready, and applies the steps' outcomes, so a step whose
dependency completes while the model still writes is dispatched at once. A prefix is
installed only when one of its new steps can run now (no dependency, or all completed): steps
that would only wait are installed with the next prefix or the whole plan, which keeps the
number of plan versions low. Nothing else of the loop runs before the plan is whole (no end
check, no deliberation, no critique of a round that is not planned yet).

The session hash says ``planning: streaming`` from the first prefix installed until the whole
plan is: a supervisor that takes the session over with that flag set has the planner write
the rest with the installed steps kept unchanged (:func:`goal_routing.rest_of_plan`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from planloop.config.settings import Settings
from planloop.core.errors import LLMError, LLMUnavailableError, PlanError
from planloop.core.models import Event, EventType, SessionStatus, Severity, StepStatus
from planloop.planner.plan import Plan
from planloop.planner.routing import agent_plan
from planloop.supervisor.io.store_port import Entry, SessionStorePort
from planloop.supervisor.io.stream_flags import PLANNING_FIELD, STREAMED_REASON, STREAMING
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.decision_log import record_usage
from planloop.supervisor.session.goal_routing import FirstPlan, rest_of_plan
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.sending import Scheduling

log = logging.getLogger(__name__)

PLAN_STREAMING = "plan_streaming"  # progress and notice kind: steps installed early
PLAN_RESUMED = "plan_resumed"  # a takeover completed a plan its former owner was streaming
POLL_MS = 20  # how long one read of the session's events waits while the plan streams

StartPlanning = Callable[[Callable[[Plan], None]], FirstPlan]


@dataclass(frozen=True)
class StreamPorts:
    """What planning uses while the first plan streams: the session's collaborators, and
    the three steps of the loop it runs meanwhile (apply events, checkpoint, announce a
    fallback), handed over as functions."""

    ctx: SupervisorContext
    io: SessionIO
    changes: PlanChanges
    scheduling: Scheduling
    apply: Callable[[list[Entry]], Awaitable[None]]
    checkpoint: Callable[[], None]
    announce_fallback: Callable[[str], Awaitable[None]]

    @property
    def sid(self) -> str:
        return self.io.sid

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def store(self) -> SessionStorePort:
        return self.io.store


class StreamedPlanning:
    """Installs and runs a streamed first plan's steps while the rest of it arrives."""

    def __init__(self, ports: StreamPorts) -> None:
        self.ports = ports
        self.state = ports.io.state
        self.installed = 0  # steps of the plan in force (the prefix installed so far)

    async def run(self, start: StartPlanning) -> FirstPlan | None:
        """Run ``start`` (the planner, given the prefix callback) on a thread, installing
        and dispatching the prefix as it grows; the whole first plan, or None when the
        session got an outcome (a cancel) while planning.

        Raises:
            PlanError, LLMError: from the planner, after the prefix installed so far.
        """
        loop = asyncio.get_running_loop()
        latest: list[Plan] = []

        def on_plan(plan: Plan) -> None:  # on the planner's thread
            loop.call_soon_threadsafe(latest.append, plan)

        planning = asyncio.ensure_future(asyncio.to_thread(start, on_plan))
        ports, state = self.ports, self.state
        while not planning.done() and state.outcome is None:
            if latest:
                await self._maybe_install(latest[-1])
            entries = await ports.io.read_events(count=ports.settings.event_batch, block_ms=POLL_MS)
            await ports.apply(entries)
            if state.steps and state.outcome is None:
                await ports.scheduling.dispatch_ready()
        if state.outcome is not None:
            # Its thread cannot be stopped: wait for it, and count what the call spent.
            (ended,) = await asyncio.gather(planning, return_exceptions=True)
            if isinstance(ended, FirstPlan):
                record_usage(state.batch, ended.usages)
            return None
        return planning.result()

    async def _maybe_install(self, prefix: Plan) -> None:
        new = prefix.steps[self.installed :]
        if not new:
            return
        states = self.state.states
        runnable = [
            s.id
            for s in new
            if all(d in states and states[d].status == StepStatus.COMPLETED for d in s.dependencies)
        ]
        if not runnable:
            return  # they would only wait: installed with the next prefix or the whole plan
        await self.install_prefix(prefix, [s.id for s in new])

    async def install_prefix(self, prefix: Plan, new: list[str]) -> None:
        """Install ``prefix`` as the next plan version, flagged incomplete, and dispatch."""
        ports = self.ports
        if self.installed == 0:
            await ports.io.write_session(PLANNING_FIELD, STREAMING)
        text = f"{STREAMED_REASON}: step(s) {', '.join(new)} installed before the reply ended"
        await ports.changes.install_plan(prefix, reason=text, replan=False)
        self.installed = len(prefix.steps)
        await ports.io.append_event(
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                severity=Severity.INFO,
                description=text,
                payload={"notice": PLAN_STREAMING, "steps": new},
            )
        )
        await ports.store.note_progress(ports.sid, PLAN_STREAMING, steps=new)
        await ports.scheduling.dispatch_ready()
        ports.checkpoint()

    async def finish(self, first: FirstPlan) -> None:
        """Install the whole plan as the next version and clear the flag."""
        ports, state = self.ports, self.state
        plan = first.plan
        if first.fallback_error and self.installed:
            # Planning failed after steps were installed: they stay (they may be running
            # or done; nothing is lost) and the agent step works on the goal beside them.
            plan = with_agent(state.plan, plan)
        # Always a version of its own, even when the last prefix has every step: the
        # session's final first plan is recorded as the whole reply's plan, with the
        # planner's reason (a rebuild from SQL reads the flag from the last reason).
        await ports.changes.install_plan(plan, reason=first.reason, replan=False)
        if self.installed:
            await ports.io.write_session(PLANNING_FIELD, "")
            log.info(
                "session=%s streamed plan whole: %d of %d step(s) installed early",
                ports.sid,
                self.installed,
                len(plan.steps),
            )

    async def resume(self) -> None:
        """Taken over while the first plan streamed: the planner writes the rest, the
        installed steps kept unchanged (or an agent step beside them if planning fails;
        an endpoint that cannot be reached fails the session, as for a first plan)."""
        ports, state = self.ports, self.state
        chat, info = ports.ctx.chat, state.info
        installed = list(state.plan.steps)
        self.installed = len(installed)
        if chat is None:
            log.warning("session=%s plan was streaming; no LLM here: running its steps", ports.sid)
            await ports.io.write_session(PLANNING_FIELD, "")
            return
        tools = (
            ports.ctx.tools.subset(info.options.tools) if info.options.tools else ports.ctx.tools
        )
        goal = info.goal or state.plan.goal
        try:
            first = await asyncio.to_thread(
                rest_of_plan,
                chat,
                tools,
                goal,
                list(state.plan.constraints),
                installed,
                max_repairs=ports.settings.plan_max_repairs,
            )
        except LLMUnavailableError as exc:
            state.outcome = (SessionStatus.FAILED, f"planning failed: {exc}")
            return
        except (PlanError, LLMError) as exc:
            log.warning("session=%s rest of the streamed plan failed: %s", ports.sid, exc)
            fallback = agent_plan(goal, tools, constraints=list(state.plan.constraints))
            first = FirstPlan(fallback, "planning failed: one agent step instead", [], str(exc))
            await ports.announce_fallback(str(exc))
        record_usage(state.batch, first.usages)
        text = (
            f"taken over while the first plan streamed ({len(installed)} step(s) installed): "
            "the planner wrote the rest, the installed steps unchanged"
        )
        await ports.store.note_progress(ports.sid, PLAN_RESUMED, reason=text)
        await self.finish(
            FirstPlan(first.plan, f"{first.reason}; {text}", first.usages, first.fallback_error)
        )


def with_agent(installed: Plan, fallback: Plan) -> Plan:
    """The installed steps with the fallback's agent step beside them."""
    ids = set(installed.step_ids)
    extra = [s for s in fallback.steps if s.id not in ids]
    return installed.model_copy(update={"steps": [*installed.steps, *extra]})
