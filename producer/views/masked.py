"""What a view masks: the params a session's tools declare sensitive, and its report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planloop.core.catalogue import SensitiveNames
from planloop.core.keys import Keys
from planloop.core.masking import mask
from planloop.core.models import SessionRecord
from planloop.planner.plan import Plan
from planloop.producer.client import Producer


def load_session_plan(producer: Producer, record: SessionRecord) -> Plan | None:
    """The session's current plan version from Redis (None when it is gone)."""
    raw = producer.state.plan_json(record.id, record.plan_version)
    return Plan.model_validate_json(raw) if raw else None


def sensitive_params(producer: Producer, plan: Plan | None) -> frozenset[str]:
    """The params the plan's tools mark sensitive: this registry's and the tool catalogue's
    (workers publish it, so tools this process never imported count too)."""
    if plan is None:
        return frozenset()
    names = SensitiveNames(producer.tools, producer.state.r, Keys(producer.settings.key_prefix))
    return names.of_tools(step.tool for step in plan.steps)


def masked_report(report: Mapping[str, Any], sensitive: frozenset[str]) -> dict[str, Any]:
    """The report through the masker; ``sensitive`` param names apply inside step outputs
    (a tool's param may share a name with a field of the report itself)."""
    shown: dict[str, Any] = mask(report)
    for step, raw in zip(shown.get("steps") or [], report.get("steps") or [], strict=True):
        step["output"] = mask(raw.get("output"), sensitive)
    return shown
