"""Tolerant extraction of the one JSON object or array in a model's answer."""

from __future__ import annotations

import json
import re
from typing import Any

from planloop.core.errors import LLMResponseError

# ```json ... ``` or plain ``` ... ```; the body is taken lazily so two blocks stay two.
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\r?\n?(.*?)```", re.DOTALL)

# Prose may hold stray brackets ("see [1]"); stop looking after this many starting points.
_MAX_STARTS = 64


def extract_json(text: str) -> dict[str, Any] | list[Any]:
    """Return the JSON object or array held in ``text``.

    Accepts, in this order: the whole text as JSON; the body of a fenced code block; the first
    balanced ``{...}`` or ``[...]`` span with prose before or after it. Each candidate is also
    tried with trailing commas removed.

    Args:
        text: The model's answer, verbatim.

    Returns:
        The decoded top-level object or array.

    Raises:
        LLMResponseError: No candidate decodes to an object or array; the message says why,
            precisely enough to send back to the model.
    """
    first_error: str | None = None
    for candidate in _candidates(text):
        value, error = _decode(candidate)
        if value is not None:
            return value
        first_error = first_error or error
    if first_error is None:
        raise LLMResponseError("the answer holds no JSON object or array", raw=text)
    raise LLMResponseError(f"the answer's JSON does not parse: {first_error}", raw=text)


def _candidates(text: str) -> list[str]:
    """Spans of ``text`` that may be the JSON, most likely first."""
    found = [text.strip()]
    found += [m.group(1).strip() for m in _FENCE.finditer(text)]
    found += _balanced_spans(text)
    return [c for c in dict.fromkeys(found) if c]


def _decode(candidate: str) -> tuple[dict[str, Any] | list[Any] | None, str | None]:
    """Decode ``candidate`` as is, then without trailing commas; return (value, error)."""
    if candidate[:1] not in "{[":
        return None, None
    error: str | None = None
    for attempt in (candidate, strip_trailing_commas(candidate)):
        try:
            value = json.loads(attempt)
        except json.JSONDecodeError as exc:
            error = error or f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            continue
        if isinstance(value, dict | list):
            return value, None
    return None, error


def _balanced_spans(text: str) -> list[str]:
    """Each balanced ``{...}``/``[...]`` span of ``text``, by where it starts."""
    spans: list[str] = []
    starts = [i for i, ch in enumerate(text) if ch in "{["][:_MAX_STARTS]
    covered_to = -1
    for start in starts:
        if start < covered_to:
            continue  # inside a span already taken: its own parts are not the answer
        end = _matching_close(text, start)
        if end is not None:
            spans.append(text[start : end + 1])
            covered_to = end
    return spans


def _matching_close(text: str, start: int) -> int | None:
    """Index of the bracket closing ``text[start]``, skipping brackets inside strings."""
    stack: list[str] = []
    in_string = False
    escaped = False
    pairs = {"{": "}", "[": "]"}
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            escaped, in_string = _string_step(ch, escaped)
        elif ch == '"':
            in_string = True
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return i
    return None


def _string_step(ch: str, escaped: bool) -> tuple[bool, bool]:
    """Advance through a JSON string by one character; return (escaped, still_in_string)."""
    if escaped:
        return False, True
    if ch == "\\":
        return True, True
    return False, ch != '"'


def strip_trailing_commas(text: str) -> str:
    """Drop each comma that is followed (past whitespace) by ``}`` or ``]``, outside strings."""
    out: list[str] = []
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            escaped, in_string = _string_step(ch, escaped)
        elif ch == '"':
            in_string = True
        elif ch == "," and _next_visible(text, i + 1) in ("}", "]"):
            continue
        out.append(ch)
    return "".join(out)


def _next_visible(text: str, start: int) -> str:
    """The first non-whitespace character of ``text`` from ``start``, or ``""``."""
    end = start
    while end < len(text) and text[end].isspace():
        end += 1
    return text[end : end + 1]
