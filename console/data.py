"""What the session page shows, as JSON-ready dicts: read through the producer's own views
(Redis first, the SQL record for what Redis no longer holds), masked like ``planloop show``."""

from __future__ import annotations

from typing import Any

from planloop.console.llm_view import llm_calls
from planloop.console.step_detail import StepRun, runs_of
from planloop.console.timeline import timeline
from planloop.console.versions import all_step_ids, version_view
from planloop.core.masking import mask, mask_text
from planloop.core.models import Event, StepState
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.history import session_history
from planloop.producer.views import gather_session, llm_budget, masked_report, sensitive_params

AWAITING_APPROVAL = "awaiting approval"  # the note supervisor/session/loop.py writes


def step_view(state: StepState) -> dict[str, Any]:
    """One step's live fields for the page (what the live stream sends on each change)."""
    duration = (
        round(state.finished_at - state.started_at, 3)
        if state.finished_at and state.started_at
        else None
    )
    return {
        "status": state.status.value,
        "attempt": state.attempt,
        "worker": state.worker,
        "error": mask_text(state.error),
        "error_kind": state.error_kind,
        "note": mask_text(state.note),
        "dispatched_at": state.dispatched_at,
        "started_at": state.started_at,
        "finished_at": state.finished_at,
        "duration_s": duration,
    }


def run_view(run: StepRun, reported: dict[str, Any] | None) -> dict[str, Any]:
    """A step's fields from Redis; when Redis let its hash go, its last recorded attempt or
    the report's line."""
    state = run.state
    if state.attempt or state.status.value != "pending" or not (run.attempts or reported):
        return step_view(state)
    if run.attempts:
        last = run.attempts[-1]
        return step_view(StepState.model_validate({**last, "attempt": last["attempt"]}))
    assert reported is not None
    return {
        **step_view(StepState()),
        "status": reported.get("status", "pending"),
        "attempt": reported.get("attempts", 0),
        "worker": reported.get("worker") or "",
        "error": mask_text(reported.get("error") or ""),
        "note": mask_text(reported.get("note") or ""),
        "duration_s": reported.get("duration_s"),
    }


def event_view(event_id: str, event: Event, hidden: frozenset[str]) -> dict[str, Any]:
    data = event.model_dump(mode="json")
    data["payload"] = mask(event.payload, hidden)
    data["description"] = mask_text(event.description)
    return {"id": event_id, **data}


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
    return [Plan.model_validate_json(row.plan) for row in producer.record.plan_versions(sid)]


def hidden_params(producer: Producer, plans: list[Plan]) -> frozenset[str]:
    """The params any version's tools mark sensitive."""
    hidden: frozenset[str] = frozenset()
    for plan in plans:
        hidden |= sensitive_params(producer, plan)
    return hidden


def session_plans(producer: Producer, sid: str) -> tuple[dict[str, Any], list[Plan], Any, Any]:
    """The session's fields, every plan version, its report and events.

    Raises:
        SessionNotFoundError: neither Redis nor the SQL record knows ``sid``.
    """
    session, plan, report, events = gather_session(producer, sid)
    current = int(session.get("plan_version") or 1)
    plans = plan_versions(producer, sid, current) or ([plan] if plan is not None else [])
    return session, plans, report, events


def session_detail(producer: Producer, sid: str) -> dict[str, Any]:
    """Everything the session page shows.

    Raises:
        SessionNotFoundError: neither Redis nor the SQL record knows ``sid``.
    """
    session, plans, report, events = session_plans(producer, sid)
    hidden = hidden_params(producer, plans)
    history = session_history(producer.record, sid)
    ids = all_step_ids(plans)
    runs = runs_of(producer, sid, ids)
    reported = {str(s["id"]): s for s in (report or {}).get("steps", [])}
    steps = {i: run_view(runs[i], reported.get(i)) for i in ids}
    statuses = {i: s["status"] for i, s in steps.items()}
    reasons = {v["version"]: v["reason"] for v in history["plan_versions"]}
    versions = [
        version_view(plans, n, reasons.get(n, ""), statuses, hidden)
        for n in range(1, len(plans) + 1)
    ]
    calls = llm_calls(producer.record, sid, producer.settings)
    shown_report = masked_report(report, hidden) if report else None
    return {
        "session": mask(session),
        "steps": steps,
        "versions": versions,
        "events": [event_view(i, ev, hidden) for i, ev in events],
        "decisions": history["decisions"],
        "llm_calls": calls,
        "llm": history["llm"],
        "uses_llm": bool(calls) or bool(session.get("llm_usage")),
        "llm_budget": llm_budget(producer, session, history),
        "report": shown_report,
        "answer": (shown_report or {}).get("answer"),
        "timeline": timeline(
            session,
            {i: r.attempts for i, r in runs.items()},
            calls,
            history["decisions"],
            events,
        ),
        "lineage": lineage_view(producer, sid, session),
        "awaiting_approval": sorted(
            i
            for i, s in steps.items()
            if s["note"] == AWAITING_APPROVAL and s["status"] in ("pending", "ready")
        ),
    }


def lineage_view(producer: Producer, sid: str, session: dict[str, Any]) -> dict[str, Any]:
    """Where the session came from and what came of it, for the page's links both ways; and
    whether ``continue`` would take it (producer/lineage.py says why not)."""
    from planloop.core.models import SessionRecord, SessionStatus
    from planloop.producer.lineage import continue_refusal

    info = SessionRecord.model_validate(
        {
            "id": sid,
            "status": session.get("status") or SessionStatus.PENDING,
            "error": session.get("error") or "",
        }
    )
    return {
        "forked_from": session.get("forked_from") or "",
        "forked_version": session.get("forked_version") or 0,
        "carried": sorted(session.get("carried") or {}),
        "continued": session.get("continued") or 0,
        "forks": [{"id": child, "version": v} for child, v in producer.children(sid)],
        "continue_refused": continue_refusal(info, leased=not info.status.ended),
    }


def session_timeline(producer: Producer, sid: str) -> dict[str, Any]:
    """The timeline alone (the page refreshes it while the session runs).

    Raises:
        SessionNotFoundError: neither Redis nor the SQL record knows ``sid``.
    """
    session, plans, _report, events = session_plans(producer, sid)
    history = session_history(producer.record, sid)
    runs = runs_of(producer, sid, all_step_ids(plans))
    calls = llm_calls(producer.record, sid, producer.settings)
    return timeline(
        session, {i: r.attempts for i, r in runs.items()}, calls, history["decisions"], events
    )
