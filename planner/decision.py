"""The decision agent's answer (``ReplanDecision``) and the incremental re-planner's answer."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from planloop.planner.plan import Step


class ReplanAction(StrEnum):
    """What the supervisor does about the events that triggered a decision."""

    CONTINUE = "CONTINUE"  # nothing to change: keep running the current plan
    REPLAN_REMAINING = "REPLAN_REMAINING"  # freeze completed steps, re-plan only the rest
    REPLAN_FULL = "REPLAN_FULL"  # keep completed results as context, replace the whole plan
    ABORT = "ABORT"  # give up: cancel what runs, compensate what completed


class ReplanDecision(BaseModel):
    """The decision agent's answer, stored with the session and shown to the user."""

    action: ReplanAction = Field(description="What to do next.")
    reasoning: str = Field(description="Why, in a few sentences a user can read.")
    steps_to_cancel: list[str] = Field(
        default_factory=list,
        description="Ids of steps that are not completed and should be cancelled.",
    )
    new_context_hints: list[str] = Field(
        default_factory=list, description="Facts or advice the re-planner should be told."
    )
    confidence: float = Field(0.5, ge=0, le=1, description="How sure the agent is, 0 to 1.")


class SubGraph(BaseModel):
    """The re-planner's answer to REPLAN_REMAINING: steps to add to the frozen plan."""

    steps: list[Step] = Field(
        description="New steps; they may depend on completed steps and reference their outputs."
    )
    reasoning: str = Field("", description="Why these steps, in a sentence or two.")


class FullReplan(BaseModel):
    """The re-planner's answer to REPLAN_FULL: a plan for everything not completed.

    Unlike :class:`~planloop.planner.plan.Plan` it may hold no step: a model that sees
    nothing left worth doing says so with ``"steps": []`` ("nothing to add"), an answer
    the supervisor carries out rather than a schema error sent back for repair.
    """

    model_config = ConfigDict(extra="ignore")

    goal: str = Field("", description="The goal (the session's own is kept).")
    steps: list[Step] = Field(
        description="Steps replacing every step not completed; they may depend on completed "
        "steps and reference their outputs. Empty: nothing is left worth doing."
    )
    constraints: list[str] = Field(default_factory=list, description="Rules the plan keeps.")
