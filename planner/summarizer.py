"""The summarizer: the final answer of a session, from its goal, results and critique.

An ``answer_schema`` (JSON schema, from the submitter) is enforced like a plan rule: an
answer whose ``data`` does not fit goes back to the model with the exact validation error,
at most ``max_repairs`` times; past that the text is kept and the schema error reported.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, Field, field_validator
from referencing.exceptions import Unresolvable

from planloop.core.errors import ConfigError
from planloop.planner.answer_schema import check_answer_schema
from planloop.planner.answer_shape import answer_shape
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.prompting import render_prompt

logger = logging.getLogger(__name__)


class Answer(BaseModel):
    """The summarizer's answer: text for people, ``data`` for programs."""

    text: str = Field(description="The answer to the goal, in the shape the prompt asks for.")
    data: Any = Field(None, description="The structured answer (fits the answer schema).")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        # An empty text is no answer: the client's repair loop sends it back, and a session
        # whose model keeps answering nothing gets Planloop's own account instead.
        if not value.strip():
            raise ValueError("the answer's text is empty: write the answer to the goal")
        return value


AnswerSource = Literal["summarizer", "critic", "answer_step", "planloop"]


class SessionAnswer(BaseModel):
    """The answer a session ends with, as the report and the API show it."""

    text: str
    data: Any = None
    schema_error: str | None = None  # data still did not fit answer_schema after repairs
    # The session did not complete: the text says what was achieved and what failed.
    partial: bool = False
    # Who wrote it: the summarizer, the critic (with its passing verdict on a round that
    # looked complete), the plan's answer step, or Planloop itself (no LLM
    # call was possible or allowed: a spent budget, a cancel, a failing endpoint).
    source: AnswerSource = "summarizer"


def schema_problem(data: Any, schema: dict[str, Any]) -> str | None:
    """Why ``data`` does not fit ``schema`` (the first error, with its path), or None."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    except (Unresolvable, RecursionError):  # a schema stored before these were refused
        return "the answer_schema itself cannot be used (an unresolvable $ref or too deep)"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "<root>"
    return f"data at {where}: {error.message}"


@dataclass
class Summarizer:
    """Writes a session's final answer.

    Attributes:
        chat: The model.
        max_repairs: Times an answer whose data breaks the schema goes back to the model.
    """

    chat: ChatModel
    max_repairs: int = 2

    def answer(
        self,
        goal: str,
        results: str,
        critique: str,
        answer_schema: dict[str, Any] | None = None,
        *,
        outcome: str = "completed",
        partial: bool = False,
    ) -> tuple[SessionAnswer, list[Usage]]:
        """The final answer to ``goal`` from the rendered ``results``; ``outcome`` says how
        the session ended (and what to repair, when the plan stated an answer that broke
        the schema), ``partial`` marks the answer of a session that did not complete.

        Raises:
            LLMError: the endpoint failed or kept answering unusable JSON.
        """
        refused = None
        if answer_schema is not None:
            try:
                check_answer_schema(answer_schema)
            except ConfigError as exc:  # given through the API unchecked: answer without it
                refused, answer_schema = str(exc), None
        schema_text = (
            json.dumps(answer_schema, indent=1) if answer_schema else "(none: data is null)"
        )
        chat = render_prompt(
            "summarizer",
            goal=goal,
            results=results,
            critique=critique or "(no critique)",
            answer_schema=schema_text,
            outcome=outcome,
            shape=answer_shape(goal),
        )
        usages: list[Usage] = []
        repairs = 0
        while True:
            answer, usage = self.chat.complete_json(Role.SUMMARIZER, chat, Answer)
            usages.append(usage)
            if answer_schema is None:
                made = SessionAnswer(text=answer.text, schema_error=refused, partial=partial)
                return made, usages
            problem = schema_problem(answer.data, answer_schema)
            if problem is None:
                made = SessionAnswer(text=answer.text, data=answer.data, partial=partial)
                return made, usages
            repairs += 1
            logger.info("summarizer answer refused: %s", problem)
            if repairs > self.max_repairs:
                made = SessionAnswer(text=answer.text, schema_error=problem, partial=partial)
                return made, usages
            chat += [
                {"role": "assistant", "content": answer.model_dump_json()},
                {
                    "role": "user",
                    "content": f"Your answer cannot be used: {problem}\n"
                    "Reply with the corrected JSON only: no prose, no code fences.",
                },
            ]
