"""The critic: judges a finished round's results against the goal and the constraints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from planner.llm import ChatModel, Role, Usage
from planner.prompting import bullets, render_prompt


class Critique(BaseModel):
    """The critic's verdict on one round, stored with the session and shown in the report."""

    passed: bool = Field(description="True when the results achieve the goal.")
    feedback: str = Field("", description="What is wrong or missing, for the next round.")
    missing: list[str] = Field(
        default_factory=list, description="Things the goal needs that no result provides."
    )
    confidence: float = Field(0.5, ge=0, le=1, description="How sure the critic is, 0 to 1.")


@dataclass
class Critic:
    """Asks the critic role whether a round's results achieve the goal.

    Attributes:
        chat: The model (the client repairs answers that do not fit :class:`Critique`).
    """

    chat: ChatModel

    def judge(
        self,
        goal: str,
        constraints: Sequence[str],
        results: str,
        *,
        round_number: int,
        max_rounds: int,
    ) -> tuple[Critique, Usage]:
        """The verdict on ``results`` (rendered step outputs, tool data fenced).

        Raises:
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        messages = render_prompt(
            "critic",
            goal=goal,
            constraints=bullets(constraints),
            results=results,
            round=str(round_number),
            max_rounds=str(max_rounds),
        )
        return self.chat.complete_json(Role.CRITIC, messages, Critique)
