"""Agent steps: a plan step that a worker runs as a bounded ReAct loop over the tool registry.

An agent step is a step whose ``tool`` is the reserved name :data:`REACT_TOOL`. Its
``instruction`` says what to do, in natural language; its ``params`` fit
:class:`ReactParams`: the tools the loop may call (a subset of the registry), the most
thought → action → observation turns it may take, and an optional ``context`` whose values
may reference other steps' outputs (resolved at dispatch like any params)::

    - id: research
      tool: agent.react
      instruction: Find out why SKU12345 sells less this month and say what to do
      params:
        tools: [ecommerce.reviews, ecommerce.competitors]
        max_iterations: 6
        context: {units_sold: "{{orders.output.units_sold}}"}
      dependencies: [orders]

The output of the step is the loop's final answer (see :mod:`planner.react`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planloop.core.tools import ToolRegistry
from planloop.planner.plan import Step

REACT_TOOL = "agent.react"  # reserved: no registered tool may take this name
DEFAULT_MAX_ITERATIONS = 6
MAX_ITERATIONS_CEILING = 50


class ReactParams(BaseModel):
    """The params of an agent step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: list[str] = Field(min_length=1, description="Tools the loop may call.")
    max_iterations: int = Field(
        DEFAULT_MAX_ITERATIONS,
        ge=1,
        le=MAX_ITERATIONS_CEILING,
        description="Most model turns (each a tool call or the final answer).",
    )
    context: dict[str, Any] = Field(
        default_factory=dict, description="Data the loop starts from (may hold references)."
    )


def is_agent_step(step: Step) -> bool:
    """Whether ``step`` runs as a ReAct loop."""
    return step.tool == REACT_TOOL


def agent_step_problem(step: Step, tools: ToolRegistry) -> str | None:
    """Why an agent step cannot run, or None: no instruction, bad params, unknown tools."""
    if not step.instruction.strip():
        return f"agent step ({REACT_TOOL}) needs an 'instruction' saying what to do"
    try:
        params = ReactParams.model_validate(step.params)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"param {where!r}: {error['msg']}" if where else f"params: {error['msg']}"
    for name in params.tools:
        if name == REACT_TOOL:
            return f"param 'tools': an agent step cannot call {REACT_TOOL} itself"
        if name not in tools:
            known = ", ".join(tools.names()) or "none"
            return f"param 'tools': unknown tool {name!r} (tools: {known})"
    return None
