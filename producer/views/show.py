"""``planloop show``: a session's event timeline, report and DAG (Mermaid), from Redis or the
SQL record; the console reads a session the same way."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from planloop.core.errors import SessionNotFoundError
from planloop.core.llm_budget import UsageByModel, add_calls, budget_line, budget_view
from planloop.core.masking import mask
from planloop.core.models import Event, EventType, SessionOptions, Severity
from planloop.core.record import SqlRecord
from planloop.planner.dag import to_mermaid
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.history import print_history, session_history
from planloop.producer.terminal import make_console, terminal_safe
from planloop.producer.views.cells import SEVERITY_COLOURS, event_line, styled_status
from planloop.producer.views.masked import load_session_plan, masked_report, sensitive_params
from planloop.producer.views.report import print_report


def report_statuses(report: Mapping[str, Any] | None) -> dict[str, str]:
    """Step id -> status from a report."""
    return {s["id"]: s["status"] for s in (report or {}).get("steps", [])}


def mermaid_block(plan: Plan, statuses: Mapping[str, str]) -> str:
    """The plan as a fenced Mermaid flowchart coloured by ``statuses``."""
    return f"```mermaid\n{to_mermaid(plan, statuses)}\n```"


def print_show(
    producer: Producer, sid: str, *, as_json: bool, console: Console | None = None
) -> None:
    """Event timeline, final report and the DAG (Mermaid) of one session.

    Redis is read first; the SQL record fills in whatever Redis no longer holds.

    Raises:
        SessionNotFoundError: neither Redis nor the SQL record knows ``sid``.
    """
    console = console or make_console()
    session, plan, report, events = gather_session(producer, sid)
    statuses = report_statuses(report)
    if plan is not None and not statuses:
        statuses = {i: s.status.value for i, s in producer.state.steps(sid, plan.step_ids).items()}
    mermaid = to_mermaid(plan, statuses) if plan is not None else ""
    hidden = sensitive_params(producer, plan)
    history = session_history(producer.record, sid)
    budget = llm_budget(producer, session, history)
    forks = producer.children(sid)
    if as_json:
        doc = {
            "session": session,
            "events": [
                {"id": event_id, **ev.model_dump(mode="json"), "payload": mask(ev.payload, hidden)}
                for event_id, ev in events
            ],
            "mermaid": mermaid,
            **history,
            "llm_budget": budget,
            "forks": [{"id": child, "version": version} for child, version in forks],
        }
        # the plan's sensitive names apply inside payloads and outputs, not to the doc's keys
        doc = {**mask(doc), "report": masked_report(report, hidden) if report else None}
        print(json.dumps(doc, indent=2, default=str))  # plain stdout: no rich markup or wrapping
        return
    console.print(f"session {sid}: ", styled_status(str(session.get("status", "?"))), sep="")
    for line in lineage_lines(session, forks):
        console.print(terminal_safe(line), markup=False, highlight=False)
    console.rule("events")
    for _, ev in events:
        console.print(Text(event_line(ev), style=SEVERITY_COLOURS.get(ev.severity.value, "")))
    if not events:
        console.print("(no events)")
    print_history(console, history)
    console.print("llm: " + budget_line(budget), markup=False, highlight=False)
    console.rule("report")
    if report is not None:
        print_report(console, report, hidden)
    else:
        console.print("(no report yet: the session has not ended)")
    console.rule("plan")
    if plan is not None:
        console.print(terminal_safe(mermaid_block(plan, statuses)), markup=False, highlight=False)
    else:
        console.print("(plan not found)")


def lineage_lines(session: Mapping[str, Any], forks: Iterable[tuple[str, int]]) -> list[str]:
    """Where the session came from and what came of it: its parent and version, the steps
    it carried over, how often it was continued, the sessions forked from it."""
    lines = []
    if session.get("forked_from"):
        carried = sorted(session.get("carried") or {})
        lines.append(
            f"forked from {session['forked_from']} at plan version "
            f"{session.get('forked_version', '?')}; carried over: {', '.join(carried) or 'none'}"
        )
    if session.get("continued"):
        lines.append(f"continued {session['continued']} time(s)")
    lines.extend(f"forked into {child} (from plan version {version})" for child, version in forks)
    return lines


def llm_budget(
    producer: Producer, session: Mapping[str, Any], history: Mapping[str, Any]
) -> dict[str, Any]:
    """LLM tokens and cost spent against the session's budgets: the running totals of the
    session hash, else the recorded calls."""
    usage: UsageByModel = {m: list(t) for m, t in (session.get("llm_usage") or {}).items()}
    if not usage:
        add_calls(usage, history.get("llm_calls", []))
    options = SessionOptions.model_validate(session.get("options") or {})
    return budget_view(usage, options, producer.settings)


def gather_session(
    producer: Producer, sid: str
) -> tuple[dict[str, Any], Plan | None, dict[str, Any] | None, list[tuple[str, Event]]]:
    """Session fields, plan, report and events: Redis first, then the SQL record."""
    try:
        hot = producer.session(sid)
        session = hot.model_dump(mode="json", exclude={"report"})
        plan, report = load_session_plan(producer, hot), hot.report
    except SessionNotFoundError:
        row = producer.record.session(sid)
        if row is None:
            raise
        session = {
            "id": row.id,
            "status": row.status,
            "goal": row.goal,
            "epoch": row.epoch,
            "owner": row.owner,
            "plan_version": row.plan_version,
            "replans": row.replans,
            "created_at": row.created_at,
            "finished_at": row.finished_at,
            "error": row.error,
            "options": json.loads(row.options or "{}"),
            "forked_from": row.forked_from,
            "forked_version": row.forked_version,
            "continued": row.continued,
        }
        plan, report = None, json.loads(row.report) if row.report else None
    events = producer.state.events(sid)
    if plan is None or not events:
        record = producer.record
        if plan is None:
            versions = record.plan_versions(sid)
            plan = Plan.model_validate_json(versions[-1].plan) if versions else None
        if not events:
            events = list(_sql_events(record, sid))
    return session, plan, report, events


def _sql_events(record: SqlRecord, sid: str) -> Iterable[tuple[str, Event]]:
    for row in record.events(sid):
        yield (
            row.event_id,
            Event(
                type=EventType(row.type),
                severity=Severity(row.severity),
                step_id=row.step_id,
                attempt=row.attempt,
                description=row.description,
                payload=json.loads(row.payload or "{}"),
                occurred_at=row.occurred_at,
                actor=row.actor,
            ),
        )
