"""The forms of structured output a chat request can ask for, strongest first.

1. ``json_schema`` — OpenAI, vLLM, Ollama;
2. ``json_object`` with a ``schema`` beside it — llama.cpp's server, which answers 500 to (1);
3. plain prompting with the schema in the system message, parsed tolerantly.

With ``PLANLOOP_LLM_STRUCTURED_OUTPUT=auto`` the client starts at (1) and steps down, for good,
each time the server rejects the form it sent (:func:`fallback_after`).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import openai
from pydantic import BaseModel

from planloop.core.errors import LLMUnavailableError
from planloop.planner.llm_errors import brief

logger = logging.getLogger(__name__)

StructuredMode = Literal["json_schema", "json_object", "none"]

# What each form falls back to when the server rejects it.
_FALLBACK: dict[StructuredMode, StructuredMode | None] = {
    "json_schema": "json_object",
    "json_object": "none",
    "none": None,
}
# Statuses a server answers a response_format it does not support with (llama.cpp: 500).
_REJECTION_STATUSES = frozenset({400, 422, 500})


def response_format(mode: StructuredMode, schema: type[BaseModel]) -> dict[str, Any]:
    """The request's ``response_format`` for ``mode`` (not for ``none``, which sends none)."""
    json_schema = schema.model_json_schema()
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": json_schema, "strict": False},
        }
    return {"type": "json_object", "schema": json_schema}  # llama.cpp's form


def shape_messages(
    chat: list[dict[str, str]], schema: type[BaseModel], mode: StructuredMode
) -> list[dict[str, str]]:
    """The messages as sent: without json_schema support the schema goes into the prompt.

    It is appended to the first system message so that message's other lines (the
    ``ROLE:`` line the templates start with) stay where they are.
    """
    if mode == "json_schema":
        return chat
    hint = (
        "Reply with one JSON value and nothing else. It must fit this JSON schema:\n"
        + json.dumps(schema.model_json_schema(), separators=(",", ":"))
    )
    shaped = [dict(m) for m in chat]
    if shaped and shaped[0].get("role") == "system":
        shaped[0]["content"] = f"{shaped[0].get('content', '')}\n\n{hint}"
    else:
        shaped.insert(0, {"role": "system", "content": hint})
    return shaped


def rejects_format(exc: openai.APIStatusError, mode: StructuredMode) -> bool:
    """Whether ``exc`` is the server refusing the response_format we sent."""
    if mode == "none" or exc.status_code not in _REJECTION_STATUSES:
        return False
    text = f"{exc.message} {exc.body}".lower()
    return any(word in text for word in ("response_format", "json_schema", mode))


def fallback_after(
    mode: StructuredMode, exc: openai.APIStatusError, *, auto: bool, base_url: str
) -> StructuredMode:
    """The form to use from now on, the server at ``base_url`` having rejected ``mode``.

    Raises:
        LLMUnavailableError: The form was forced (not ``auto``) or there is none to fall to.
    """
    fallback = _FALLBACK[mode]
    if not auto or fallback is None:
        raise LLMUnavailableError(
            f"{base_url} rejected response_format {mode!r} (HTTP {exc.status_code}: "
            f"{brief(exc)}); set PLANLOOP_LLM_STRUCTURED_OUTPUT=auto to let Planloop "
            "pick a form it accepts",
            base_url=base_url,
            status=exc.status_code,
        )
    logger.warning(
        "%s rejected response_format %s (HTTP %d); using %s from now on",
        base_url,
        mode,
        exc.status_code,
        fallback,
    )
    return fallback
