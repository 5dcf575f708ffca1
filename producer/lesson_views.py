"""``planloop lessons``: the lessons with their measured effect (and whether each is stale),
one lesson, disable, delete."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from planloop.core.lessons import LessonStats, LessonStore, Thresholds, staleness
from planloop.core.record import LessonRow
from planloop.producer.terminal import make_console, terminal_safe


@dataclass(frozen=True)
class Freshness:
    """What a listing tells stale lessons by: tool versions served now, the age limit."""

    served: Mapping[str, str] = field(default_factory=dict)
    max_age_days: float = 0.0

    def stale(self, row: LessonRow, now: float | None = None) -> str | None:
        at = time.time() if now is None else now
        return staleness(row, self.served, now=at, max_age_days=self.max_age_days)


def stats_doc(s: LessonStats, fresh: Freshness | None = None) -> dict[str, Any]:
    """One lesson and its effect, as the JSON output and the table show it; ``stale`` is
    why it is no longer given to prompts (None while it is)."""
    row = s.row
    return {
        "id": row.id,
        "enabled": bool(row.enabled),
        "lesson": row.lesson,
        "trigger": row.trigger,
        "evidence": row.evidence,
        "applies_to": {"toolsets": json.loads(row.toolsets), "tools": json.loads(row.tools)},
        "tool_versions": json.loads(row.tool_versions or "{}"),
        "stale": (fresh or Freshness()).stale(row),
        "source_session": row.source_session,
        "goal": row.goal,
        "merged": row.merged,
        "uses": row.uses,
        "with": {"sessions": s.used, "succeeded": s.used_ok, "rate": s.rate_with},
        "without": {"sessions": s.without, "succeeded": s.without_ok, "rate": s.rate_without},
        "replans_per_session": {"with": s.replans_used, "without": s.replans_without},
        "disabled_reason": row.disabled_reason,
        "embedding_model": row.embedding_model or "(lexical)",
        "created_at": row.created_at,
        "last_used_at": row.last_used_at,
    }


def _rate(ok: int, n: int) -> str:
    return f"{ok}/{n} ({ok / n:.0%})" if n else "-"


def print_lessons(
    store: LessonStore,
    thresholds: Thresholds,
    *,
    as_json: bool,
    fresh: Freshness | None = None,
    console: Console | None = None,
) -> None:
    """Every lesson with its uses, the success rate of the sessions that used it and of
    similar sessions (same toolsets, similar goals) that did not, and ``stale`` for one
    prompts no longer get."""
    stats = store.stats(thresholds=thresholds)
    if as_json:
        print(json.dumps([stats_doc(s, fresh) for s in stats], indent=2))
        return
    out = console or make_console()
    if not stats:
        out.print("no lessons yet")
        return
    table = Table("id", "on", "uses", "with it", "similar without", "lesson")
    for s in stats:
        stale = (fresh or Freshness()).stale(s.row)
        table.add_row(
            str(s.row.id),
            ("stale" if stale else "yes") if s.row.enabled else "no",
            str(s.row.uses),
            _rate(s.used_ok, s.used),
            _rate(s.without_ok, s.without),
            terminal_safe(s.row.lesson if len(s.row.lesson) <= 90 else s.row.lesson[:87] + "..."),
        )
    out.print(table)


def print_lesson(
    store: LessonStore,
    lesson_id: int,
    thresholds: Thresholds,
    *,
    as_json: bool,
    fresh: Freshness | None = None,
    console: Console | None = None,
) -> bool:
    """One lesson in full; False when there is no such lesson."""
    found = store.stats([lesson_id], thresholds=thresholds)
    if not found:
        return False
    doc = stats_doc(found[0], fresh)
    if as_json:
        print(json.dumps(doc, indent=2))
        return True
    out = console or make_console()
    for key, value in doc.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else value
        out.print(f"{key}: {terminal_safe(shown)}", highlight=False, markup=False, soft_wrap=True)
    return True


__all__ = ["Freshness", "LessonRow", "print_lesson", "print_lessons", "stats_doc"]
