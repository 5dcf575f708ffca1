"""Checking a step's output against its ``expect`` list."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from planloop.planner.plan import Expectation

_MISSING = object()

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
    "in": lambda actual, value: actual in value,
    "not_in": lambda actual, value: actual not in value,
    "len_ge": lambda actual, value: len(actual) >= value,
    "len_le": lambda actual, value: len(actual) <= value,
}


def check_expectations(expect: Sequence[Expectation], output: Any) -> list[str]:
    """One readable message per failed check (``shortfall: expected gt 0, got -3``).

    ``exists`` passes when the path is present and not null; a missing path fails every op.

    Returns:
        The failures, in the order of ``expect``; empty when every check passes.
    """
    failures = []
    for check in expect:
        problem = _check(check, output)
        if problem:
            failures.append(f"{check.path or 'output'}: {problem}")
    return failures


def _check(check: Expectation, output: Any) -> str | None:
    actual = _lookup(output, check.path)
    wanted = "expected to exist" if check.op == "exists" else f"expected {check.op}"
    if check.op not in ("exists", "truthy"):
        wanted = f"{wanted} {_show(check.value)}"
    if actual is _MISSING:
        return f"{wanted}, got nothing (path missing)"
    if check.op == "exists":
        return None if actual is not None else f"{wanted}, got null"
    if check.op == "truthy":
        return None if actual else f"{wanted}, got {_show(actual)}"
    try:
        passed = bool(_COMPARE[check.op](actual, check.value))
    except TypeError:
        # comparing a number with text, or taking len() of a number: the output has the wrong shape
        return f"{wanted}, got {_show(actual)} which cannot be compared that way"
    if passed:
        return None
    if check.op.startswith("len_"):
        return f"{wanted}, got length {len(actual)}"
    return f"{wanted}, got {_show(actual)}"


def _lookup(output: Any, path: str) -> Any:
    """The value at dotted ``path`` (digits index lists), or a private sentinel when missing."""
    current = output
    for segment in path.split(".") if path else ():
        if isinstance(current, Mapping) and segment in current:
            current = current[segment]
        elif (
            isinstance(current, list | tuple) and segment.isdigit() and int(segment) < len(current)
        ):
            current = current[int(segment)]
        else:
            return _MISSING
    return current


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else f"{text[:77]}..."
