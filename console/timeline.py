"""The session's timeline on one time axis: every attempt of every step (a bar from start to
end; a running one open-ended, the page extends it to now), LLM calls (a bar of their
latency), decisions and people's actions (points), and the session's start, end and total."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from planloop.core.masking import mask_text
from planloop.core.models import Event, EventType

# Notices the supervisor itself raises on the signal stream (not a person's action).
NOTICE_KEY = "notice"


def attempt_items(attempts: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    items = []
    for step_id, rows in attempts.items():
        for row in rows:
            start = row.get("started_at") or row.get("dispatched_at") or 0.0
            if not start:
                continue  # never sent
            items.append(
                {
                    "kind": "attempt",
                    "lane": step_id,
                    "label": f"{step_id} #{row['attempt']}",
                    "status": row["status"],
                    "worker": row.get("worker") or "",
                    "queued_at": row.get("dispatched_at") or start,
                    "start": start,
                    "end": row.get("finished_at") or None,
                }
            )
    return items


def llm_items(calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "llm",
            "lane": "LLM",
            "label": f"{c['role']} ({c['model']})",
            "status": "llm",
            "start": c["at"] - c["latency_s"],
            "end": c["at"],
        }
        for c in calls
    ]


def decision_items(decisions: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "decision",
            "lane": "decisions",
            "label": f"{d['action']} ({d['source']})",
            "status": "decision",
            "start": d["at"],
            "end": d["at"],
        }
        for d in decisions
    ]


def is_human_action(event: Event) -> bool:
    """A person's signal, constraint or command (approve, cancel, retry, skip)."""
    if event.type == EventType.NEW_CONSTRAINT:
        return True
    return event.type == EventType.EXTERNAL_SIGNAL and NOTICE_KEY not in event.payload


def human_items(events: Iterable[tuple[str, Event]]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "human",
            "lane": "people",
            "label": _by(mask_text(ev.description)[:120] or ev.type.value, ev.actor),
            "status": "human",
            "start": ev.occurred_at,
            "end": ev.occurred_at,
        }
        for _, ev in events
        if is_human_action(ev)
    ]


def _by(label: str, actor: str) -> str:
    """A person's action names who took it (the console user, or a CLI call's ``--as``)."""
    return f"{label} (by {mask_text(actor)})" if actor else label


def timeline(
    session: Mapping[str, Any],
    attempts: Mapping[str, list[dict[str, Any]]],
    calls: Iterable[Mapping[str, Any]],
    decisions: Iterable[Mapping[str, Any]],
    events: Iterable[tuple[str, Event]],
) -> dict[str, Any]:
    """The timeline of one session, ``now`` being the server's clock (the page measures
    running bars against it, whatever its own clock says)."""
    items = [
        *attempt_items(attempts),
        *llm_items(calls),
        *decision_items(decisions),
        *human_items(events),
    ]
    items.sort(key=lambda item: item["start"])
    created = float(session.get("created_at") or 0.0)
    started = float(session.get("started_at") or 0.0) or created
    finished = float(session.get("finished_at") or 0.0) or None
    return {
        "now": time.time(),
        "created_at": created,
        "started_at": started,
        "finished_at": finished,
        "total_s": round(finished - created, 3) if finished and created else None,
        "items": items,
    }
