"""A model's answer text to a validated instance, and the request to repair one that is not.

The errors are phrased for the model: the chat client sends them back with the answer
(:meth:`planner.openai_chat.OpenAIChatModel.complete_json`), so the model can fix exactly
what was wrong.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from planloop.core.errors import LLMResponseError
from planloop.planner.json_repair import extract_json

T = TypeVar("T", bound=BaseModel)


def validate_answer(raw: str, schema: type[T]) -> T:
    """Extract the JSON from ``raw`` and validate it against ``schema``.

    Raises:
        LLMResponseError: not JSON, or not fitting the schema; phrased for the model.
    """
    data = extract_json(raw)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise LLMResponseError(
            f"the JSON does not fit the {schema.__name__} schema: {problems}", raw=raw
        ) from exc


def repair_request(error: str) -> dict[str, str]:
    """The user message that sends an unusable answer back with what was wrong with it."""
    return {
        "role": "user",
        "content": f"Your previous answer could not be used: {error}\n"
        "Reply with the corrected JSON only: no prose, no code fences.",
    }
