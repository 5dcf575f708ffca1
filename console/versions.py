"""Plan versions as the page draws them: each version's steps and edges, the diff to the
version before (:func:`planner.plan_diff.diff_plans`, the one ``planloop show`` prints), and
the steps of earlier versions that ran but this version dropped ("ghosts": drawn greyed with
how they ended, so a re-plan never hides the step that failed)."""

from __future__ import annotations

from typing import Any

from planloop.core.masking import mask, mask_text
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_diff import diff_plans

# A dropped step is shown in later versions once it ran (or ended without running).
SHOWN_WHEN_DROPPED = frozenset({"running", "completed", "failed", "interrupted", "skipped"})


def step_fields(step: Step, hidden: frozenset[str]) -> dict[str, Any]:
    return {
        "tool": step.tool,
        "title": mask_text(step.title),
        "dependencies": step.dependencies,
        "params": mask(step.params, hidden),
        "critical": step.critical,
        "requires_approval": step.requires_approval,
    }


def ghosts_of(
    plans: list[Plan], number: int, statuses: dict[str, str], hidden: frozenset[str]
) -> list[dict[str, Any]]:
    """Steps of versions before ``number`` that version ``number`` no longer has and that
    ran, with the last version that had them."""
    present = plans[number - 1].by_id
    found: dict[str, dict[str, Any]] = {}
    for version, plan in enumerate(plans[: number - 1], start=1):
        for step in plan.steps:
            if step.id in present or statuses.get(step.id) not in SHOWN_WHEN_DROPPED:
                continue
            found[step.id] = {
                "id": step.id,
                "version": version,
                "status": statuses[step.id],
                **step_fields(step, hidden),
            }
    return list(found.values())


def version_view(
    plans: list[Plan],
    number: int,
    reason: str,
    statuses: dict[str, str],
    hidden: frozenset[str],
) -> dict[str, Any]:
    """Plan version ``number`` (1-based) for the page."""
    plan = plans[number - 1]
    previous = plans[number - 2] if number > 1 else None
    diff = diff_plans(previous, plan) if previous is not None else None
    ghosts = ghosts_of(plans, number, statuses, hidden)
    shown = set(plan.by_id) | {g["id"] for g in ghosts}
    edges = [[d, s.id] for s in plan.steps for d in s.dependencies if d in shown]
    edges += [[d, g["id"]] for g in ghosts for d in g["dependencies"] if d in shown]
    return {
        "version": number,
        "reason": mask_text(reason),
        "added": diff.added if diff else [],
        "removed": diff.removed if diff else [],
        "changed": diff.changed if diff else {},
        "diff": diff.lines(previous, plan) if diff and previous else [],
        "steps": {s.id: step_fields(s, hidden) for s in plan.steps},
        "ghosts": ghosts,
        "edges": edges,
    }


def all_step_ids(plans: list[Plan]) -> list[str]:
    """Every step id of every version, in first-seen order."""
    seen: dict[str, None] = {}
    for plan in plans:
        seen.update(dict.fromkeys(plan.step_ids))
    return list(seen)
