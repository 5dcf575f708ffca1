"""The one check of what a person hands Planloop: a plan, a goal, constraints, options, texts.

The CLI, the SDK and the console reach Redis only through ``producer.client.Producer``, which
applies these checks before anything is written; the supervisor applies
:func:`session_refusal` to a session it takes for the first time (anything with access to
Redis may have written it). So what passes one entry point passes all, and a refusal is a
:class:`PlanloopError` naming the field and the limit. Never the value: pydantic's own
messages (whose ``input_value`` may show the tail of a secret) are translated here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from planloop.core.errors import (
    ConfigError,
    InputLimitError,
    PlanLoadError,
    PlanloopError,
    PlanValidationError,
)
from planloop.core.input_limits import InputLimits, text_problem, value_problem
from planloop.core.models import SessionOptions
from planloop.planner.answer_schema import check_answer_schema
from planloop.planner.plan import Plan, describe

# Constraints one session may start with (each is also a text within max_input_bytes).
MAX_CONSTRAINTS = 1_000


def check_text(what: str, text: object, limits: InputLimits) -> None:
    """Refuse text that is not a str, has a control character or is too long.

    Raises:
        InputLimitError: ``what`` names the field.
    """
    if not isinstance(text, str):
        raise InputLimitError(what, f"must be text, got {type(text).__name__}")
    problem = text_problem(text, max_bytes=limits.max_input_bytes)
    if problem:
        raise InputLimitError(what, problem)


def check_goal(goal: object, constraints: object, limits: InputLimits) -> None:
    """A goal and its constraints: each a text within the limits, and together too.

    Raises:
        InputLimitError: the field at fault and the limit.
    """
    check_text("goal", goal, limits)
    if not isinstance(constraints, list | tuple):
        raise InputLimitError("constraints", "must be a list of texts")
    if len(constraints) > MAX_CONSTRAINTS:
        raise InputLimitError(
            "constraints", f"{len(constraints)} given, above the limit of {MAX_CONSTRAINTS}"
        )
    for constraint in constraints:
        check_text("constraint", constraint, limits)
    budget = limits.max_input_bytes
    assert isinstance(goal, str)  # checked above
    if budget is not None and len(goal) + sum(map(len, constraints)) > budget // 4:
        total = len(goal.encode()) + sum(len(str(c).encode()) for c in constraints)
        if total > budget:
            raise InputLimitError(
                "goal and constraints",
                f"{total} bytes together, above the limit of {budget} (max_input_bytes)",
            )


def session_options(
    options: SessionOptions | Mapping[str, Any] | None, fields: Mapping[str, Any]
) -> SessionOptions:
    """:class:`SessionOptions` from an SDK call's ``options`` and keyword fields.

    Raises:
        ConfigError: a field that is unknown or out of range, named (``setting``).
    """
    if isinstance(options, SessionOptions):
        base: dict[str, Any] = options.model_dump(exclude_unset=True)
    elif isinstance(options, Mapping):
        base = dict(options)
    elif options is None:
        base = {}
    else:
        raise ConfigError(
            f"options must be SessionOptions or a mapping, got {type(options).__name__}",
            setting="options",
        )
    try:
        return SessionOptions.model_validate({**base, **fields})
    except ValidationError as exc:
        raise _options_error(exc) from None


def _options_error(exc: ValidationError) -> ConfigError:
    """One line per pydantic error, led by the option; an unknown option is not named (its
    name is whatever the caller passed, a secret as likely as a typo)."""
    problems: list[str] = []
    fields: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        if error["type"] == "extra_forbidden":
            problems.append(f"an unknown option (known: {', '.join(SessionOptions.model_fields)})")
            continue
        fields.append(".".join(str(part) for part in error["loc"]) or "options")
        problems.append(f"{fields[-1]}: {error['msg']}")
    return ConfigError(
        f"session option {'; '.join(problems)}", setting=fields[0] if fields else "options"
    )


def check_options(options: SessionOptions, limits: InputLimits) -> None:
    """Options that validated as a model may still break a limit (or skip the model's
    checks, built with ``model_construct``): toolset names, finite numbers, the answer
    schema.

    Raises:
        ConfigError: the option at fault (``setting``), never its value.
    """
    for name in ("deadline_s", "max_cost_usd"):
        value = getattr(options, name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"session option {name}: must be a finite number", setting=name)
    for prefix in options.tools:
        try:
            check_text("toolset", prefix, limits)
        except InputLimitError as exc:
            raise ConfigError(f"session option tools: {exc}", setting="tools") from None
    if options.answer_schema is not None:
        check_answer_schema(options.answer_schema, limits)


def plan_from_data(data: Mapping[str, Any], limits: InputLimits) -> Plan:
    """A plan from its dict form (the SDK's ``submit({...})``), within ``limits``.

    Raises:
        PlanLoadError: it does not fit the schema or breaks a limit; named, never quoted.
    """
    try:
        return Plan.model_validate(dict(data), context={"limits": limits})
    except ValidationError as exc:
        raise PlanLoadError(f"plan does not fit the schema: {describe(exc)}") from None
    except RecursionError:
        raise PlanLoadError("the plan is nested too deeply to read") from None


def stored_plan(plan: Plan, limits: InputLimits) -> str:
    """``plan`` as the supervisor will read it, checked by the same reading path
    (``Plan.model_validate_json``) under ``limits``: its stored text.

    Raises:
        InputLimitError: the goal or constraints are too long.
        PlanValidationError: the plan breaks a limit or is too large; nothing was enqueued.
    """
    check_goal(plan.goal, plan.constraints, limits)
    try:
        # defaults left out: a third smaller, and as much faster to read back (here and
        # in the supervisor), which restores them
        plan_json = plan.model_dump_json(exclude_defaults=True)
    except PydanticSerializationError as exc:
        raise PlanValidationError(f"the plan cannot be stored: {exc}") from None
    check_plan_text(plan_json, limits)
    return plan_json


def check_plan_text(plan_json: str, limits: InputLimits) -> Plan:
    """The plan a stored text holds, under ``limits`` (size first, then the schema).

    Raises:
        PlanValidationError: too large, or it breaks the schema or a limit.
    """
    check_plan_size(plan_json, limits)
    try:
        return Plan.model_validate_json(plan_json, context={"limits": limits})
    except ValidationError as exc:
        raise PlanValidationError(f"plan does not fit the schema: {describe(exc)}") from None


def check_plan_size(plan_json: str, limits: InputLimits) -> None:
    """Refuse a stored plan text above ``limits.max_plan_bytes``.

    Raises:
        PlanValidationError: its size and the limit.
    """
    budget = limits.max_plan_bytes
    if budget is not None and len(plan_json) > budget // 4 and len(plan_json.encode()) > budget:
        raise PlanValidationError(
            f"the plan is {len(plan_json.encode())} bytes as stored, above the limit of "
            f"{budget} (max_plan_bytes)"
        )


def check_signal(payload: Mapping[str, Any], description: str, limits: InputLimits) -> None:
    """A person's event to a running session: its text and its payload.

    Raises:
        InputLimitError: the text or a payload value breaks a limit.
    """
    check_text("signal text", description, limits)
    problem = value_problem(dict(payload), max_depth=limits.max_nesting_depth)
    if problem:
        raise InputLimitError("signal", problem)
    for key, value in payload.items():
        if isinstance(value, str):
            check_text(f"signal {key}", value, limits)


def session_refusal(
    goal: str,
    constraints: Sequence[object],
    options: SessionOptions,
    plan_json: str | None,
    limits: InputLimits,
    *,
    plan_checked: bool = False,
) -> str | None:
    """Why a session as stored must not start (what the producer would have refused), or
    None. ``plan_checked``: the producer validated this very plan text (only its size is
    checked again)."""
    try:
        check_goal(goal, list(constraints), limits)
        check_options(options, limits)
        if plan_json is not None and plan_checked:
            check_plan_size(plan_json, limits)
        elif plan_json is not None:
            check_plan_text(plan_json, limits)
    except PlanloopError as exc:
        return str(exc)
    return None
