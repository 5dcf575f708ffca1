"""Planloop's public Python API: the client, the plan models and the ``@tool`` decorator.

::

    import planloop

    with planloop.Client() as client:
        sid = client.submit(planloop.Plan(goal="...", steps=[planloop.Step(id="a", tool="...")]))
        report = client.wait(sid)

Everything importable from here is the supported surface; other modules are internal.

The names load on first use (PEP 562): every Planloop process imports this package first
(the CLI, workers, supervisors), and none of them should pay for the client's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planloop.aio import AsyncClient
    from planloop.client import Client, PlanLike, SessionEvent, WaitTimeoutError
    from planloop.config.settings import Settings
    from planloop.core.errors import (
        CommandRefusedError,
        ConfigError,
        PermanentToolError,
        PlanError,
        PlanloopError,
        SessionEndedError,
        SessionError,
        SessionNotFoundError,
        ToolError,
        TransientToolError,
        UnknownToolError,
    )
    from planloop.core.models import (
        Event,
        EventType,
        SessionOptions,
        SessionRecord,
        SessionStatus,
        Severity,
    )
    from planloop.core.tools import ToolContext, tool
    from planloop.planner.plan import Compensation, Expectation, Plan, Step, load_plan
    from planloop.report import Answer, Report, StepResult

# public name -> the module that defines it
_HOMES = {
    "Settings": "planloop.config.settings",
    **dict.fromkeys(
        (
            "CommandRefusedError",
            "ConfigError",
            "PermanentToolError",
            "PlanError",
            "PlanloopError",
            "SessionEndedError",
            "SessionError",
            "SessionNotFoundError",
            "ToolError",
            "TransientToolError",
            "UnknownToolError",
        ),
        "planloop.core.errors",
    ),
    **dict.fromkeys(
        ("Event", "EventType", "SessionOptions", "SessionRecord", "SessionStatus", "Severity"),
        "planloop.core.models",
    ),
    "ToolContext": "planloop.core.tools",
    "tool": "planloop.core.tools",
    "AsyncClient": "planloop.aio",
    **dict.fromkeys(("Client", "PlanLike", "SessionEvent", "WaitTimeoutError"), "planloop.client"),
    **dict.fromkeys(("Answer", "Report", "StepResult"), "planloop.report"),
    **dict.fromkeys(
        ("Compensation", "Expectation", "Plan", "Step", "load_plan"), "planloop.planner.plan"
    ),
}

__all__ = [
    "Answer",
    "AsyncClient",
    "Client",
    "CommandRefusedError",
    "Compensation",
    "ConfigError",
    "Event",
    "EventType",
    "Expectation",
    "PermanentToolError",
    "Plan",
    "PlanError",
    "PlanLike",
    "PlanloopError",
    "Report",
    "SessionEndedError",
    "SessionError",
    "SessionEvent",
    "SessionNotFoundError",
    "SessionOptions",
    "SessionRecord",
    "SessionStatus",
    "Settings",
    "Severity",
    "Step",
    "StepResult",
    "ToolContext",
    "ToolError",
    "TransientToolError",
    "UnknownToolError",
    "WaitTimeoutError",
    "load_plan",
    "tool",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'planloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
