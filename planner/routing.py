"""Routing a goal: one open-ended agent step, or a multi-step plan.

``planloop submit --goal --mode auto`` (the default) asks the router role; ``--mode react``
and ``--mode plan`` skip it. The router may also find that the goal needs no tool at all
(``answer``): the session is then answered directly by the summarizer, with no plan. A goal
run in react mode, and a goal whose planning failed even after its repairs, becomes a
one-step plan: an agent step with the goal as its instruction and the session's tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from planloop.core.tools import ToolRegistry
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.plan import Plan, Step
from planloop.planner.prompting import bullets, render_prompt, tool_catalogue
from planloop.planner.react_step import DEFAULT_MAX_ITERATIONS, REACT_TOOL

Mode = Literal["plan", "react", "auto"]
RouteMode = Literal["plan", "react", "answer"]  # "answer": no tool needed, no plan
AGENT_STEP_ID = "agent"


class Route(BaseModel):
    """The router's answer."""

    mode: RouteMode
    reasoning: str = Field("", description="Why, in one sentence.")


class Router:
    """Asks the (cheap) router model how a goal should run."""

    def __init__(self, chat: ChatModel, tools: ToolRegistry) -> None:
        self.chat = chat
        self.tools = tools

    def route(self, goal: str, lessons: Sequence[str] = ()) -> tuple[Route, Usage]:
        """The route for ``goal`` (``lessons``: advice from earlier sessions).

        Raises:
            LLMError: The model failed or kept answering garbage.
        """
        messages = render_prompt(
            "router",
            goal=goal,
            lessons=bullets(lessons),
            catalogue=tool_catalogue(self.tools, compact=True),
        )
        return self.chat.complete_json(Role.ROUTER, messages, Route)


def agent_plan(
    goal: str,
    tools: ToolRegistry,
    *,
    constraints: list[str] | None = None,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    timeout_s: float | None = None,
) -> Plan:
    """A one-step plan: an agent step working on ``goal`` with every tool of ``tools``."""
    instruction = goal
    if constraints:
        instruction += "\n\nConstraints:\n" + "\n".join(f"- {c}" for c in constraints)
    step = Step(
        id=AGENT_STEP_ID,
        title="Agent working on the goal",
        instruction=instruction,
        tool=REACT_TOOL,
        params={"tools": tools.names(), "max_iterations": max_iterations},
        timeout_s=timeout_s,
        critical=True,
    )
    return Plan(goal=goal, steps=[step], constraints=list(constraints or []))
