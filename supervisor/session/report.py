"""The report every ended session gets: per-step status, outputs, timings, errors.

Everything in it is shown (``show``, the SQL record), so it passes the one masker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from planloop.core.masking import mask_text
from planloop.core.models import SessionStatus, StepState
from planloop.core.values import preview
from planloop.planner.plan import Plan


def build_report(
    sid: str,
    plan: Plan,
    states: Mapping[str, StepState],
    outputs: Mapping[str, Any],
    *,
    status: SessionStatus,
    error: str,
    started_at: float,
    finished_at: float,
    replans: int,
    plan_version: int,
    sensitive: Collection[str] = (),
) -> dict[str, Any]:
    """A JSON-ready report of one ended session, masked (``sensitive``: param names of the
    plan's tools to hide in outputs, besides the names that look secret)."""
    steps = []
    for step in plan.steps:
        st = states.get(step.id, StepState())
        duration = st.finished_at - st.started_at if st.started_at and st.finished_at else None
        steps.append(
            {
                "id": step.id,
                "title": step.title,
                "tool": step.tool,
                "status": st.status.value,
                "attempts": st.attempt,
                "worker": st.worker,
                "started_at": st.started_at or None,
                "finished_at": st.finished_at or None,
                "duration_s": round(duration, 4) if duration is not None else None,
                "error": mask_text(st.error) or None,
                "note": mask_text(st.note) or None,
                "output": preview(outputs.get(step.id), sensitive, ref=st.output_ref),
            }
        )
    counts: dict[str, int] = {}
    for entry in steps:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return {
        "session_id": sid,
        "goal": mask_text(plan.goal),
        "status": status.value,
        "error": mask_text(error) or None,
        "plan_version": plan_version,
        "replans": replans,
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_s": round(finished_at - started_at, 4) if started_at else None,
        "counts": counts,
        "steps": steps,
    }
