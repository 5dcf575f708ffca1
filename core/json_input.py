"""Reading JSON that a person wrote: duplicate keys and overlong numbers refused, not guessed.

``json.loads`` keeps the last of two equal keys (a plan step's second ``tool`` silently wins),
converts a 5,000-digit integer in quadratic time or raises a bare ``ValueError`` past 4,300
digits, and nests until the interpreter's recursion limit. Here each is a
:class:`JsonInputError` whose message names the key or the limit, never the value.
"""

from __future__ import annotations

import json
from typing import Any

from planloop.core.input_limits import MAX_INT_DIGITS

# Key text shown in a message: enough to find it, never a whole pasted value.
_KEY_CHARS = 60


class JsonInputError(ValueError):
    """A JSON document refused; ``line`` and ``column`` are 1-based (0 = unknown)."""

    def __init__(self, message: str, *, line: int = 0, column: int = 0) -> None:
        self.line, self.column = line, column
        super().__init__(message)


def shown_key(key: object) -> str:
    """A key as a message shows it: ``repr`` (control characters escaped), cut short."""
    text = repr(key)
    return text if len(text) <= _KEY_CHARS else text[: _KEY_CHARS - 1] + "…"


def loads(text: str | bytes) -> Any:
    """The Python data of one JSON document.

    Raises:
        JsonInputError: not JSON, a duplicate key in one object, an integer of more than
            ``MAX_INT_DIGITS`` digits, or nesting past what the parser can read.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise JsonInputError(
            f"bad JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except RecursionError:
        raise JsonInputError("bad JSON: nested too deeply to read") from None
    except UnicodeDecodeError:
        raise JsonInputError("bad JSON: the text is not UTF-8") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) == len(pairs):  # the common case: one C call, no Python loop
        return found
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise JsonInputError(f"bad JSON: duplicate key {shown_key(key)} in one object")
        seen.add(key)
    return found  # pragma: no cover (len differs only when a key repeats)


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonInputError(f"bad JSON: an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)
