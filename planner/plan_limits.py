"""The input limits a plan is checked against while pydantic parses it (core/input_limits.py):
the validators of :mod:`planloop.planner.plan` call these, naming the step that breaks one."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError

from planloop.core.input_limits import (
    CEILINGS,
    MAX_FALLBACK_DEPTH,
    InputLimits,
    clean,
    value_problem,
)

# True while the steps of a plan whose whole document passed the input limits in one walk
# are validated: their own checks, which exist to name the culprit, are then skipped (one
# walk over a 10,000-step plan instead of 10,000 small ones: 3x faster to parse).
DOCUMENT_CLEAN: ContextVar[bool] = ContextVar("planloop_plan_document_clean", default=False)


# Containers above a main step's params in a plan document: the plan, ``steps``, the step.
PARAMS_LEVEL = 3


def checked_before(info: ValidationInfo) -> bool:
    context = info.context
    return isinstance(context, dict) and context.get("checked") is True


def limits_of(info: ValidationInfo) -> InputLimits:
    """The limits passed as validation context; the ceilings when none (a stored plan)."""
    context = info.context
    limits = context.get("limits") if isinstance(context, dict) else None
    return limits if isinstance(limits, InputLimits) else CEILINGS


def within_limits(value: Any, info: ValidationInfo, where: str) -> Any:
    if DOCUMENT_CLEAN.get():
        return value
    problem = value_problem(value, max_depth=limits_of(info).max_nesting_depth, path=where)
    if problem:
        raise PydanticCustomError("plan_limit", "{problem}", {"problem": problem})
    return value


# Step fields that hold text, checked for control characters.
_TEXTS = ("id", "title", "instruction", "tool", "phase")


def check_step(data: dict[str, Any], limits: InputLimits, *, texts_checked: bool) -> None:
    """Raise ``plan_limit`` naming the step when its data breaks a limit.

    ``texts_checked``: the whole document passed the walk of :class:`Plan`; only the
    fallback nesting is left to check.
    """
    if not texts_checked:
        _check_values(data, limits)
    if data.get("fallback") and _fallback_depth(data) > MAX_FALLBACK_DEPTH:
        raise PydanticCustomError(
            "plan_limit",
            "step {step}: fallback sub-graphs nested more than {limit} levels deep",
            {"step": repr(data.get("id")), "limit": MAX_FALLBACK_DEPTH},
        )


def _check_values(data: dict[str, Any], limits: InputLimits) -> None:
    """Texts, params, compensation and expectations of one raw step within ``limits``."""
    depth = limits.max_nesting_depth
    texts = {key: data.get(key) for key in _TEXTS}
    texts["dependencies"] = data.get("dependencies")
    texts["timeout_s"] = data.get("timeout_s")
    parts: list[tuple[Any, str, int]] = [(texts, "", 2), (data.get("params"), "params", depth)]
    compensate = data.get("compensate")
    if isinstance(compensate, dict):
        parts.append((compensate.get("tool"), "compensate.tool", 0))
        parts.append((compensate.get("params"), "compensate.params", depth))
    expect = data.get("expect")
    if isinstance(expect, list):
        for i, check in enumerate(expect):
            if isinstance(check, dict):
                parts.append((check.get("path"), f"expect.{i}.path", 0))
                parts.append((check.get("value"), f"expect.{i}.value", depth))
    if not clean([(value, max_depth) for value, _, max_depth in parts]):
        for value, where, max_depth in parts:
            problem = value_problem(value, max_depth=max_depth, path=where)
            if problem:
                raise PydanticCustomError(
                    "plan_limit",
                    "step {step}: {problem}",
                    {"step": repr(data.get("id")), "problem": problem},
                )


def _fallback_depth(data: dict[str, Any]) -> int:
    """Levels of ``fallback`` lists under a raw step (0 = none), walked without recursion."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(data, 0)]
    while todo:
        step, level = todo.pop()
        deepest = max(deepest, level)
        if level > MAX_FALLBACK_DEPTH:
            break
        fallback = step.get("fallback") if isinstance(step, dict) else None
        if isinstance(fallback, list):
            todo.extend((child, level + 1) for child in fallback)
    return deepest
