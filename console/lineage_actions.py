"""The console's fork and continue actions (producer/lineage.py), for the ``admin`` role:
a fork from a plan version or from an edited plan (YAML or JSON text, checked by the one
input check like a submitted plan), a continue with more budget."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from planloop.core.input_limits import InputLimits
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer

LINEAGE_ACTIONS = ("fork", "continue")


def lineage_call(
    client: Producer, sid: str, name: str, body: dict[str, Any], actor: str
) -> Callable[[], object]:
    """What action ``name`` (fork or continue) of ``body`` calls, as ``actor``.

    Raises:
        ValueError: a field of the wrong type.
        PlanLoadError: an edited plan that cannot be read.
    """
    if name == "fork":
        version = _number(body, "version", int)
        text = body.get("plan")
        if text is not None and not isinstance(text, str):
            raise ValueError("fork's plan must be the plan's text (YAML or JSON)")
        plan = None
        if text:
            limits = InputLimits.from_settings(client.settings)
            plan = parse_plan(text, source="the edited plan", limits=limits)
        return lambda: client.fork(sid, version=version, plan=plan, actor=actor)
    max_replans = _number(body, "max_replans", int)
    max_tokens = _number(body, "max_tokens", int)
    deadline = _number(body, "deadline_s", float)

    def resume() -> str:
        client.continue_session(
            sid, max_replans=max_replans, deadline_s=deadline, max_tokens=max_tokens, actor=actor
        )
        return sid

    return resume


def _number(body: dict[str, Any], field: str, kind: type[int] | type[float]) -> Any:
    """An optional number of ``body`` (None when absent or empty)."""
    value = body.get(field)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field} must be a number")
    if kind is int and not float(value).is_integer():
        raise ValueError(f"{field} must be a whole number")
    if not math.isfinite(value):
        raise ValueError(f"{field} must be finite")
    return kind(value)
