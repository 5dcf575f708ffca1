"""A goal without a plan: the LLM planner writes version 1 (recorded, never redone), or, when
the router finds that no tool is needed, the session ends answered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from planloop.core.errors import LLMBudgetSpentError, LLMError, PlanError
from planloop.core.models import Event, EventType, SessionStatus, Severity
from planloop.planner.llm import streams_plans
from planloop.planner.plan import Plan
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.decision_log import record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.goal_routing import (
    REACT_FALLBACK,
    FirstPlan,
    first_plan,
    route_goal,
)
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.rounds import Rounds
from planloop.supervisor.session.streaming import StreamedPlanning


async def announce_fallback(io: SessionIO, error: str) -> None:
    """Say on the event and progress streams that an agent step replaces a failed plan."""
    text = f"planning failed after its repairs ({error}); running one agent step instead"
    notice = {"notice": REACT_FALLBACK}
    await io.append_event(
        Event(
            type=EventType.EXTERNAL_SIGNAL,
            severity=Severity.WARNING,
            description=text,
            payload=notice,
        )
    )
    await io.store.note_progress(io.sid, REACT_FALLBACK, reason=text)


async def plan_goal(
    ctx: SupervisorContext,
    io: SessionIO,
    deliberation: Deliberation,
    rounds: Rounds,
    streamed: StreamedPlanning,
) -> None:
    """Plan the session's goal (its outcome is set instead when it cannot be planned)."""
    state = io.state
    if ctx.chat is None:
        state.outcome = (
            SessionStatus.FAILED,
            "the session has a goal but no plan, and no LLM is configured",
        )
        return
    spent = deliberation.llm_budget_spent()
    if spent is not None:  # a takeover of a session that spent it before it had a plan
        state.outcome = (SessionStatus.ABORTED, f"{spent}: not planned")
        return
    options, chat, goal = state.info.options, ctx.chat, state.info.goal
    tools = ctx.tools.subset(options.tools) if options.tools else ctx.tools
    lessons = await deliberation.advice()
    route = await asyncio.to_thread(route_goal, chat, tools, goal, options.mode, lessons)
    record_usage(state.batch, route.usages)
    if route.mode == "answer":  # no tool needed: the summarizer answers, no plan
        await io.store.note_progress(io.sid, "answer_directly", reason=route.reason)
        rounds.answer_directly(route.reason)
        return
    spent = deliberation.llm_budget_spent() if route.mode == "plan" else None
    if spent is not None:
        state.outcome = (SessionStatus.ABORTED, f"{spent}: not planned")
        return

    def plan(on_plan: Callable[[Plan], None] | None) -> FirstPlan:
        return first_plan(
            chat,
            tools,
            goal,
            list(deliberation.constraints),
            mode=route.mode,
            max_repairs=ctx.settings.plan_max_repairs,
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
        await announce_fallback(io, first.fallback_error)
    await streamed.finish(first)
