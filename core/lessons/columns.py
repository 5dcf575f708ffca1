"""The lessons tables' JSON columns read and written (vectors, names, tool versions), and
what they decide: a lesson's toolsets in scope, its staleness."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from planloop.core.lesson_freshness import in_scope, stale_reason
from planloop.core.record import LessonRow


def compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def vector_of(raw: str) -> list[float]:
    """A JSON vector (empty when none)."""
    if not raw:
        return []
    value = json.loads(raw)
    return [float(v) for v in value] if isinstance(value, list) else []


def versions_of(raw: str) -> dict[str, str]:
    """A JSON object tool name -> version (empty when none)."""
    value = json.loads(raw) if raw else {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def names_of(raw: str) -> list[str]:
    """A JSON list of names (toolsets, tools)."""
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else []


def toolsets_of(tool_names: Collection[str]) -> tuple[str, ...]:
    """The toolset prefixes (``supply_chain`` of ``supply_chain.erp_stock``) of tools."""
    return tuple(sorted({n.split(".", 1)[0] for n in tool_names if n}))


def staleness(
    row: LessonRow, served: Mapping[str, str], *, now: float, max_age_days: float
) -> str | None:
    """Why the lesson of ``row`` is stale against the ``served`` tool versions, or None."""
    return stale_reason(
        versions_of(row.tool_versions),
        served,
        created_at=row.created_at,
        now=now,
        max_age_days=max_age_days,
    )


def meets(lesson_toolsets: Sequence[str], toolsets: Sequence[str]) -> bool:
    return in_scope(lesson_toolsets, toolsets)
