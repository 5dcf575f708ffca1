"""How a session with a goal and no plan gets its first plan: routed, planned, or an agent.

1. The mode (``SessionOptions.mode``): ``plan`` and ``react`` are the submitter's choice;
   ``auto`` asks the router role (a cheap model), and plans when the router fails. The
   router's ``answer`` (no tool needed) ends the session with a direct answer, no plan.
2. ``react``: a one-step plan, an agent step with the goal as its instruction and the
   session's tools.
3. ``plan``: the LLM planner, with its repairs. A planner that still fails (an unusable
   answer, a plan that does not validate) gives way to one agent step, which the session
   announces; an endpoint that cannot be reached fails the session as before (an agent
   step could not reach it either).

Synchronous (LLM calls): the session runs these on a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from planloop.core.errors import LLMBudgetSpentError, LLMError, LLMUnavailableError, PlanError
from planloop.core.tools import ToolRegistry
from planloop.planner.first_plans import Planner
from planloop.planner.llm import ChatModel, Usage, streams_plans
from planloop.planner.plan import Plan, Step
from planloop.planner.routing import Mode, RouteMode, Router, agent_plan

log = logging.getLogger(__name__)

REACT_FALLBACK = "react_fallback"  # the notice and progress kind of a fallback to an agent


@dataclass(frozen=True)
class RouteChoice:
    """Where a goal goes, why, and the router call it took (if any)."""

    mode: RouteMode
    reason: str
    usages: list[Usage] = field(default_factory=list)


@dataclass(frozen=True)
class FirstPlan:
    """The session's first plan, why it is that plan, and the LLM calls it took."""

    plan: Plan
    reason: str
    usages: list[Usage] = field(default_factory=list)
    fallback_error: str = ""  # the planning failure an agent step stands in for


def route_goal(
    chat: ChatModel, tools: ToolRegistry, goal: str, mode: Mode, lessons: Sequence[str] = ()
) -> RouteChoice:
    """The mode a goal runs in: the submitter's, else the router's (``plan`` if it fails)."""
    if mode != "auto":
        return RouteChoice(mode, f"mode {mode} chosen at submit")
    try:
        route, usage = Router(chat, tools).route(goal, lessons)
    except LLMError as exc:
        log.warning("router failed, planning the goal: %s", exc)
        return RouteChoice("plan", f"router failed ({exc}); planning")
    return RouteChoice(route.mode, f"router: {route.reasoning or route.mode}", [usage])


def first_plan(
    chat: ChatModel,
    tools: ToolRegistry,
    goal: str,
    constraints: list[str],
    *,
    mode: RouteMode,
    max_repairs: int,
    lessons: Sequence[str] = (),
    on_plan: Callable[[Plan], None] | None = None,
) -> FirstPlan:
    """The plan for ``goal`` in ``mode`` (``plan`` or ``react``).

    With ``on_plan`` and a chat model that streams plans, the planner's reply is streamed
    and ``on_plan`` gets the growing valid prefix of the plan while it arrives (called on
    this thread); the plan returned keeps that prefix.

    Raises:
        LLMUnavailableError: The planner could not reach the endpoint.
        LLMBudgetSpentError: The session's LLM budget was spent before a repair.
    """
    if mode == "react":
        plan = agent_plan(goal, tools, constraints=constraints)
        return FirstPlan(plan, "one agent step (react mode)")
    planner = Planner(chat, tools, max_repairs=max_repairs)
    try:
        if on_plan is not None and streams_plans(chat):
            plan, usages = planner.plan_streamed(goal, constraints, lessons, on_plan)
            return FirstPlan(plan, "planned by the LLM planner (streamed)", usages)
        plan, usages = planner.plan(goal, constraints, lessons)
    except (LLMUnavailableError, LLMBudgetSpentError):
        raise  # an agent step would not reach the endpoint, or spend past the budget
    except (PlanError, LLMError) as exc:
        log.warning("planning failed after its repairs, one agent step instead: %s", exc)
        plan = agent_plan(goal, tools, constraints=constraints)
        return FirstPlan(plan, "planning failed: one agent step instead", [], str(exc))
    return FirstPlan(plan, "planned by the LLM planner", usages)


def rest_of_plan(
    chat: ChatModel,
    tools: ToolRegistry,
    goal: str,
    constraints: list[str],
    installed: Sequence[Step],
    *,
    max_repairs: int,
    lessons: Sequence[str] = (),
) -> FirstPlan:
    """The whole first plan of a session taken over while its plan was streaming:
    ``installed`` (the steps its former owner installed, perhaps running) kept unchanged.

    Raises:
        LLMUnavailableError: The planner could not reach the endpoint.
        PlanError, LLMError: Planning failed after its repairs.
    """
    planner = Planner(chat, tools, max_repairs=max_repairs)
    plan, usages = planner.plan_rest(goal, constraints, installed, lessons=lessons)
    return FirstPlan(plan, "planned by the LLM planner (rest of a streamed plan)", usages)
