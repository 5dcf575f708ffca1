"""What the console shows, as JSON-ready dicts: read through the producer's own views (Redis
first, the SQL record for what Redis no longer holds), masked like ``planloop show``."""

from __future__ import annotations

import time
from typing import Any

from planloop.console.layout import layout
from planloop.core.errors import SessionNotFoundError
from planloop.core.llm_budget import budget_view
from planloop.core.masking import mask
from planloop.core.models import Event, SessionRecord, StepState
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.history import plan_diff, session_history
from planloop.producer.views import gather_session, llm_budget, masked_report, sensitive_params

AWAITING_APPROVAL = "awaiting approval"  # the note supervisor/session.py writes


def step_view(state: StepState) -> dict[str, Any]:
    """One step's live fields for the page."""
    duration = (
        round(state.finished_at - state.started_at, 3)
        if state.finished_at and state.started_at
        else None
    )
    return {
        "status": state.status.value,
        "attempt": state.attempt,
        "worker": state.worker,
        "error": state.error,
        "note": state.note,
        "duration_s": duration,
    }


def event_view(event_id: str, event: Event, hidden: frozenset[str]) -> dict[str, Any]:
    data = event.model_dump(mode="json")
    data["payload"] = mask(event.payload, hidden)
    data["description"] = mask(event.description)
    return {"id": event_id, **data}


def session_summary(producer: Producer, record: SessionRecord, now: float) -> dict[str, Any]:
    """One row of the sessions list: status, progress, age, re-plans, tokens, cost."""
    plan = load_plan(producer, record.id, record.plan_version)
    states = producer.state.steps(record.id, plan.step_ids if plan else [])
    spend = budget_view(record.llm_usage, record.options, producer.settings)
    return {
        "id": record.id,
        "status": record.status.value,
        "goal": mask(record.goal),
        "steps_done": sum(1 for st in states.values() if st.status.terminal),
        "steps_total": len(states),
        "age_s": round(max(0.0, now - record.created_at), 1),
        "created_at": record.created_at,
        "replans": record.replans,
        "plan_version": record.plan_version,
        "tokens": spend["tokens"],
        "cost_usd": spend["cost_usd"],
        "awaiting": record.awaiting,
    }


def sessions(producer: Producer, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` sessions that Redis still holds."""
    now, rows = time.time(), []
    for sid in producer.state.session_ids(limit):
        try:
            rows.append(session_summary(producer, producer.session(sid), now))
        except SessionNotFoundError:
            continue  # listed but already cleaned up
    return rows


def load_plan(producer: Producer, sid: str, version: int) -> Plan | None:
    """Plan ``version`` of the session from Redis (None when Redis no longer holds it)."""
    raw = producer.state.plan_json(sid, version)
    return Plan.model_validate_json(raw) if raw else None


def plan_versions(producer: Producer, sid: str, current: int) -> list[Plan]:
    """Every plan version of the session, oldest first: Redis, else the SQL record."""
    plans: list[Plan] = []
    for version in range(1, current + 1):
        raw = producer.state.plan_json(sid, version)
        if raw is None:
            break
        plans.append(Plan.model_validate_json(raw))
    if len(plans) == current and plans:
        return plans
    record = producer.record
    return [Plan.model_validate_json(row.plan) for row in record.plan_versions(sid)]


def version_view(
    number: int, plan: Plan, previous: Plan | None, reason: str, hidden: frozenset[str]
) -> dict[str, Any]:
    """A plan version drawn: its layout, and what changed from the version before."""
    before = previous.by_id if previous is not None else {}
    after = plan.by_id
    added = [i for i in after if previous is not None and i not in before]
    changed = [i for i in after if i in before and before[i] != after[i]]
    return {
        "version": number,
        "reason": reason,
        "layout": layout(plan),
        "added": added,
        "removed": [i for i in before if i not in after],
        "changed": changed,
        "diff": plan_diff(previous, plan) if previous is not None else [],
        "steps": {
            s.id: {
                "tool": s.tool,
                "dependencies": s.dependencies,
                "params": mask(s.params, hidden),
                "critical": s.critical,
                "requires_approval": s.requires_approval,
            }
            for s in plan.steps
        },
    }


def session_detail(producer: Producer, sid: str) -> dict[str, Any]:
    """Everything the session page shows.

    Raises:
        SessionNotFoundError: neither Redis nor the SQL record knows ``sid``.
    """
    session, plan, report, events = gather_session(producer, sid)
    hidden = sensitive_params(producer, plan)
    history = session_history(producer.record, sid)
    current = int(session.get("plan_version") or 1)
    plans = plan_versions(producer, sid, current) or ([plan] if plan is not None else [])
    reasons = {v["version"]: v["reason"] for v in history["plan_versions"]}
    versions = [
        version_view(n, p, plans[n - 2] if n > 1 else None, reasons.get(n, ""), hidden)
        for n, p in enumerate(plans, start=1)
    ]
    ids = plans[-1].step_ids if plans else []
    steps = {i: step_view(st) for i, st in producer.state.steps(sid, ids).items()}
    if report and not any(s["attempt"] for s in steps.values()):
        # Redis let the step hashes go: the report says how each step ended
        steps = {
            str(s["id"]): {
                "status": s.get("status", ""),
                "attempt": s.get("attempts", 0),
                "worker": s.get("worker") or "",
                "error": s.get("error") or "",
                "note": s.get("note") or "",
                "duration_s": s.get("duration_s"),
            }
            for s in report.get("steps", [])
        }
    shown_report = masked_report(report, hidden) if report else None
    return {
        "session": mask(session),
        "steps": steps,
        "versions": versions,
        "events": [event_view(i, ev, hidden) for i, ev in events],
        "decisions": history["decisions"],
        "llm_calls": history["llm_calls"],
        "llm": history["llm"],
        "llm_budget": llm_budget(producer, session, history),
        "report": shown_report,
        "answer": (shown_report or {}).get("answer"),
        "awaiting_approval": sorted(
            i
            for i, s in steps.items()
            if s["note"] == AWAITING_APPROVAL and s["status"] in ("pending", "ready")
        ),
    }
