"""Limits on what a person may hand Planloop: sizes, nesting, numbers and characters.

Every check here is iterative (no recursion), so a hostile document fails with a message that
names where, not with a ``RecursionError``. The plan model (``planner/plan.py``) and the
producer apply the same checks, so whatever passes submit also parses in the supervisor.

Two kinds of limit:

* settings a deployment may lower (``max_nesting_depth``, ``max_step_timeout_s``, ...), passed
  to validation as :class:`InputLimits`;
* ceilings no setting may exceed (:data:`MAX_NESTING_DEPTH_CEILING`,
  :data:`STEP_TIMEOUT_CEILING_S`), applied when a stored plan is read back without settings:
  they keep every plan under pydantic's JSON recursion limit (about 200 levels) and every
  timeout within what a thread wait accepts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from planloop.config.settings import MAX_NESTING_DEPTH_CEILING, STEP_TIMEOUT_CEILING_S, Settings

__all__ = [
    "CEILINGS",
    "DEFAULTS",
    "MAX_FALLBACK_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_NESTING_DEPTH_CEILING",
    "STEP_TIMEOUT_CEILING_S",
    "InputLimits",
    "text_problem",
    "value_problem",
]

# Fallback sub-graphs nested in fallback sub-graphs: each level adds two JSON levels.
MAX_FALLBACK_DEPTH = 8

# Digits an integer may have. Longer ones have no use in a plan (the largest finite float has
# 309), cost quadratic time to convert, and Python refuses to print past 4,300.
MAX_INT_DIGITS = 300
_INT_BOUND = 10**MAX_INT_DIGITS

# C0 controls but tab, newline and carriage return; DEL; C1 controls; lone surrogates
# (valid in a Python str, not encodable as UTF-8, so Redis and SQL would refuse them later).
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")

# Path parts shown in a message before "..." (a 1,000-level path is not readable).
_SHOWN_PARTS = 6


@dataclass(frozen=True)
class InputLimits:
    """The limits one validation applies; the defaults are the ceilings (a stored plan)."""

    max_input_bytes: int | None = None
    max_nesting_depth: int = MAX_NESTING_DEPTH_CEILING
    max_yaml_alias_nodes: int | None = None
    max_step_timeout_s: float = STEP_TIMEOUT_CEILING_S
    max_plan_bytes: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> InputLimits:
        return cls(
            max_input_bytes=settings.max_input_bytes,
            max_nesting_depth=settings.max_nesting_depth,
            max_yaml_alias_nodes=settings.max_yaml_alias_nodes,
            max_step_timeout_s=settings.max_step_timeout_s,
            max_plan_bytes=settings.max_plan_bytes,
        )


CEILINGS = InputLimits()
# The settings' defaults, for callers that have no Settings (tests, the demo plan).
DEFAULTS = InputLimits.from_settings(Settings.model_construct())


def text_problem(text: str, *, max_bytes: int | None = None) -> str | None:
    """Why ``text`` is refused (a control character, too long), or None."""
    found = _FORBIDDEN.search(text)
    if found:
        return f"control character {found.group()!r} at position {found.start()}"
    if max_bytes is not None and len(text) > max_bytes // 4 and len(text.encode()) > max_bytes:
        return f"{len(text.encode())} bytes, above the limit of {max_bytes} (max_input_bytes)"
    return None


def value_problem(value: Any, *, max_depth: int, path: str = "") -> str | None:
    """Why a JSON-like value is refused, or None: nested deeper than ``max_depth``
    (a scalar is depth 0, ``{}`` and ``[]`` depth 1), a NaN or infinite number, or a string
    (value or key) with a control character, an integer of more than
    :data:`MAX_INT_DIGITS` digits. The message starts with the path (``path.a.0``).
    """
    if clean([(value, max_depth)]):
        return None
    for where, problem in _problems(value, max_depth, path):
        return f"{where}: {problem}" if where else problem
    return None


def clean(roots: list[tuple[Any, int]]) -> bool:
    """Whether every ``(value, max_depth)`` breaks no limit: one fast walk, no paths kept
    (:func:`value_problem` says what and where once this says no).

    The walk goes level by level, so no (item, budget) pair is built per value: a plan
    document is some 200,000 values.
    """
    return all(_clean_root(root, max_depth) for root, max_depth in roots)


def _clean_root(root: Any, budget: int) -> bool:
    search = _FORBIDDEN.search
    level: list[Any] = [root]
    while level:
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is str:
                if search(item):
                    return False
            elif kind is dict:
                if not budget or _bad_keys(item, search):
                    return False
                below.extend(item.values())
            elif kind is list:
                if not budget:
                    return False
                below.extend(item)
            elif kind is float or kind is int:
                if not _number_ok(item):
                    return False
            elif item is None or kind is bool:
                continue  # the usual scalars, without the slow isinstance checks below
            elif _unusual(item) and next(_problems(item, budget, ""), None) is not None:
                return False
        level = below
        budget -= 1
    return True


def _number_ok(item: Any) -> bool:
    """A finite float, or an int of at most ``MAX_INT_DIGITS`` digits (never compared with
    the bound as a float: 1e308 is a fine float and far above it)."""
    if type(item) is float:
        return math.isfinite(item)
    return bool(-_INT_BOUND < item < _INT_BOUND)


def _bad_keys(item: dict[Any, Any], search: Callable[[str], object]) -> bool:
    """Whether a str key of ``item`` holds a forbidden character: one search when every key
    is a str (the pattern matches single characters, so joining the keys changes nothing)."""
    try:
        return bool(search("".join(item)))
    except TypeError:
        return any(type(key) is str and search(key) for key in item)


def _unusual(item: Any) -> bool:
    """A str, float or container subclass (a StrEnum member, a tuple, ...): walked slowly."""
    return isinstance(item, str | float | int | Mapping | list | tuple) and not isinstance(
        item, bool
    )


def _problems(value: Any, max_depth: int, root: str) -> Iterator[tuple[str, str]]:
    todo: list[tuple[Any, tuple[str, ...], int]] = [(value, (root,) if root else (), 0)]
    while todo:
        item, parts, depth = todo.pop()
        if isinstance(item, str):
            found = _FORBIDDEN.search(item)
            if found:
                yield _show(parts), f"control character {found.group()!r} in text"
        elif isinstance(item, float):
            if not math.isfinite(item):
                yield _show(parts), f"{item} is not a finite number"
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -_INT_BOUND < item < _INT_BOUND:
                yield _show(parts), f"an integer of more than {MAX_INT_DIGITS} digits"
        elif isinstance(item, Mapping | list | tuple):
            if depth >= max_depth:
                yield (
                    _show(parts),
                    f"nested deeper than {max_depth} levels (max_nesting_depth)",
                )
                continue
            children = item.items() if isinstance(item, Mapping) else enumerate(item)
            for key, child in children:
                if isinstance(key, str):
                    found = _FORBIDDEN.search(key)
                    if found:
                        yield _show(parts), f"control character {found.group()!r} in a key"
                todo.append((child, (*parts, str(key)), depth + 1))


def _show(parts: tuple[str, ...]) -> str:
    if len(parts) <= _SHOWN_PARTS + 1:
        return ".".join(parts)
    return ".".join(parts[:_SHOWN_PARTS]) + f"...{parts[-1]} (level {len(parts)})"
