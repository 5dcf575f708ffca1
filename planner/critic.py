"""The critic: judges a finished round's results against the goal and the constraints.

When a round looks complete (every step completed), the critic is also asked for the final
answer in the same call: a passing verdict then carries the answer, and the session needs no
separate summarizer call (one model call, with its fixed latency, fewer per session). A
verdict that does not pass, or an answer that breaks the ``answer_schema``, leaves the
answer to the summarizer as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator

from planloop.planner.answer_shape import answer_shape
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.prompting import bullets, render_prompt
from planloop.planner.summarizer import Answer


class Critique(BaseModel):
    """The critic's verdict on one round, stored with the session and shown in the report."""

    passed: bool = Field(description="True when the results achieve the goal.")
    feedback: str = Field("", description="What is wrong or missing, for the next round.")
    missing: list[str] = Field(
        default_factory=list, description="Things the goal needs that no result provides."
    )
    confidence: float = Field(0.5, ge=0, le=1, description="How sure the critic is, 0 to 1.")


class CriticReply(Critique):
    """The critic's reply: the verdict, and the answer when it was asked for one.

    Without an answer schema the answer may be the text alone (``"answer": "..."``), and a
    passing verdict may leave out ``feedback`` and ``missing``: every output token of this
    call is waited for before the session ends (~20 ms each), so the short form is asked for.
    """

    answer: Answer | str | None = Field(
        None, description="The final answer, when passed: its text, or {text, data}."
    )

    @field_validator("answer", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        # A verdict with a blank answer is still a verdict: the summarizer writes the answer.
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, dict) and not str(value.get("text") or "").strip():
            return None
        return value

    @field_validator("answer", mode="after")
    @classmethod
    def _text_alone(cls, value: Answer | str | None) -> Answer | None:
        return Answer(text=value) if isinstance(value, str) else value

    def stated_answer(self) -> Answer | None:
        """The answer the critic wrote, if any, as an :class:`Answer`."""
        return Answer(text=self.answer) if isinstance(self.answer, str) else self.answer

    def verdict(self) -> Critique:
        """The verdict alone (what the session stores and reports)."""
        return Critique.model_validate(self.model_dump(exclude={"answer"}))


NO_ANSWER = "(not asked: judge only)"


def answer_request(answer_schema: dict[str, Any] | None, goal: str = "") -> str:
    """The critic prompt's ask for the final answer along with a passing verdict, in the
    shape the ``goal`` asks for (see :func:`answer_shape`)."""
    shape = f"The answer's text is {answer_shape(goal)}."
    if not answer_schema:
        return (
            'When "passed" is true, also write the final answer to the goal from the results, '
            f'as "answer": "..."; use only facts from the results. {shape}'
        )
    schema = json.dumps(answer_schema, indent=1)
    return (
        'When "passed" is true, also write the final answer to the goal from the results, '
        'as "answer": {"text": "...", "data": ...}; use only facts from the '
        f'results. {shape} "data" must fit this JSON schema:\n{schema}'
    )


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
        with_answer: bool = False,
        answer_schema: dict[str, Any] | None = None,
    ) -> tuple[CriticReply, Usage]:
        """The verdict on ``results`` (rendered step outputs, tool data fenced); with
        ``with_answer``, a passing verdict also carries the final answer.

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
            answer=answer_request(answer_schema, goal) if with_answer else NO_ANSWER,
        )
        return self.chat.complete_json(Role.CRITIC, messages, CriticReply)
