"""A session's history from the SQL record: plan versions and their diffs, decisions, LLM use,
and the writes that committed after their attempt's timeout (late effects)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from planloop.core.masking import mask_text
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan
from planloop.planner.plan_diff import diff_plans
from planloop.producer.terminal import terminal_safe


def plan_diff(old: Plan, new: Plan) -> list[str]:
    """What changed from ``old`` to ``new``: ``+`` added, ``-`` removed, ``~`` changed
    (the console's diff too: :func:`planner.plan_diff.diff_plans`)."""
    return diff_plans(old, new).lines(old, new)


def session_history(record: SqlRecord, sid: str) -> dict[str, Any]:
    """Plan versions (with the diff to the previous one), decisions, LLM calls and late
    effects."""
    versions: list[dict[str, Any]] = []
    previous: Plan | None = None
    for row in record.plan_versions(sid):
        plan = Plan.model_validate_json(row.plan)
        versions.append(
            {
                "version": row.version,
                "reason": mask_text(row.reason),
                "created_at": row.created_at,
                "steps": [s.id for s in plan.steps],
                "diff": plan_diff(previous, plan) if previous is not None else [],
            }
        )
        previous = plan
    decisions = [
        {
            "at": d.created_at,
            "action": d.action,
            "source": d.source,
            "reasoning": mask_text(d.reasoning),
            "confidence": json.loads(d.payload or "{}").get("confidence"),
            "prompt_tokens": d.prompt_tokens,
            "completion_tokens": d.completion_tokens,
        }
        for d in record.decisions(sid)
    ]
    rows = record.llm_calls(sid)
    calls = [
        {
            "at": c.created_at,
            "role": c.role,
            "model": c.model,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "latency_s": round(c.latency_s, 3),
        }
        for c in rows
    ]
    totals = {
        "calls": len(rows),
        "prompt_tokens": sum(c.prompt_tokens for c in rows),
        "completion_tokens": sum(c.completion_tokens for c in rows),
    }
    late = [
        {
            "step": e.step_id,
            "attempt": e.attempt,
            "tool": e.tool,
            "committed_at": e.committed_at,
            "status": e.status,
            "compensation_tool": e.compensation_tool,
            "settled_by": e.settled_by,
            "error": mask_text(e.error),
        }
        for e in record.late_effects(sid)
    ]
    return {
        "plan_versions": versions,
        "decisions": decisions,
        "llm_calls": calls,
        "llm": totals,
        "late_effects": late,
    }


def late_effect_line(effect: dict[str, Any]) -> str:
    """One late effect: which attempt's write, and how it was settled."""
    what = f"{effect['step']} attempt {effect['attempt']} ({effect['tool']})"
    if effect["status"] == "compensated":
        if effect["settled_by"] == "ending":
            return f"late write of {what}: compensated by the session's ending"
        undo = effect["compensation_tool"]
        return f"late write of {what}: compensated by {undo} after the session ended"
    if effect["status"] == "failed":
        return f"late write of {what}: COMPENSATION FAILED ({effect['error']})"
    if effect["status"] == "kept":
        return f"late write of {what}: kept (the session keeps its writes)"
    return f"late write of {what}: pending (settled once the session has ended)"


def print_history(console: Console, history: dict[str, Any]) -> None:
    """Plan versions with diffs, then decisions, then LLM usage."""
    console.rule("plan versions")
    for version in history["plan_versions"]:
        reason = terminal_safe(version["reason"])
        console.print(f"v{version['version']}: {reason} ({len(version['steps'])} steps)")
        for line in version["diff"]:
            console.print(f"    {terminal_safe(line)}", markup=False, highlight=False)
    console.rule("decisions")
    if not history["decisions"]:
        console.print("(none: nothing needed deciding)")
    for d in history["decisions"]:
        tokens = d["prompt_tokens"] + d["completion_tokens"]
        usage = f", {d['prompt_tokens']}+{d['completion_tokens']} tokens" if tokens else ""
        line = f"{d['action']} ({d['source']}{usage}): {d['reasoning']}"
        console.print(terminal_safe(line), markup=False)
    if history.get("late_effects"):
        console.rule("late effects")
        for effect in history["late_effects"]:
            console.print(terminal_safe(late_effect_line(effect)), markup=False, highlight=False)
    console.rule("LLM calls")
    if not history["llm_calls"]:
        console.print("(none)")
        return
    table = Table()
    for name in ("role", "model", "prompt", "completion", "latency s"):
        table.add_column(name)
    for c in history["llm_calls"]:
        table.add_row(
            terminal_safe(c["role"]),
            terminal_safe(c["model"]),
            str(c["prompt_tokens"]),
            str(c["completion_tokens"]),
            f"{c['latency_s']:.3f}",
        )
    console.print(table)
    total = history["llm"]
    console.print(
        f"{total['calls']} calls, {total['prompt_tokens']} prompt + "
        f"{total['completion_tokens']} completion tokens"
    )
