"""Plain terminal views of sessions: status, the final report, and ``show`` (timeline + DAG)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, cast

from rich.console import Console
from rich.table import Table
from rich.text import Text

from planloop.core.catalogue import SensitiveNames
from planloop.core.errors import SessionNotFoundError
from planloop.core.hot_state import dumps
from planloop.core.keys import Keys
from planloop.core.llm_budget import UsageByModel, add_calls, budget_line, budget_view
from planloop.core.masking import mask, mask_text
from planloop.core.models import (
    Event,
    EventType,
    SessionOptions,
    SessionRecord,
    Severity,
    StepState,
)
from planloop.core.record import SqlRecord
from planloop.planner.dag import to_mermaid
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.history import print_history, session_history
from planloop.producer.terminal import make_console, terminal_safe

STATUS_COLOURS: dict[str, str] = {
    "pending": "white",
    "ready": "yellow",
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "interrupted": "dark_orange",
    "skipped": "bright_black",
    "cancelled": "magenta",
    "aborted": "red",
}
SEVERITY_COLOURS: dict[str, str] = {"INFO": "white", "WARNING": "yellow", "CRITICAL": "red"}

SHORT_TEXT = 60
EVENT_TEXT = 400  # an event's description in a plain line (watch wraps it; show keeps it)
SHORT_OUTPUT = 50


def styled_status(status: str) -> Text:
    """``status`` in its colour."""
    return Text(status, style=STATUS_COLOURS.get(status, ""))


def short(text: object, limit: int = SHORT_TEXT) -> str:
    """One line of at most ``limit`` characters (``…`` marks a cut), masked, terminal-safe."""
    # escapes dropped first: an escape inside a word could otherwise hide it from the masker
    flat = mask_text(" ".join(terminal_safe(text).split())) if text is not None else ""
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def clock(ts: float) -> str:
    """``HH:MM:SS.mmm`` local time of ``ts`` (empty for 0)."""
    if not ts:
        return ""
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"


def seconds(value: float | None) -> str:
    """A duration for humans (empty when unknown)."""
    return "" if value is None else f"{value:.2f}s"


def age(ts: float, now: float | None = None) -> str:
    """How long ago ``ts`` was, coarsely (``12s``, ``5m``, ``3h``, ``2d``)."""
    delta = max(0.0, (now if now is not None else time.time()) - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{int(delta // size)}{unit}"
    return f"{int(delta)}s"


def event_line(event: Event) -> str:
    """One plain line per event: time, type, severity, step (with attempt), who asked for
    it (a person's command or signal), description."""
    step = f"{event.step_id}#{event.attempt}" if event.step_id else "-"
    return (
        f"{clock(event.occurred_at)} {event.type.value:<24} {event.severity.value:<8} "
        f"{step:<20} {actor_text(event)}{short(event.description, EVENT_TEXT)}"
    ).rstrip()


def actor_text(event: Event) -> str:
    """``by NAME: `` for an event a person asked for, "" for the system's own."""
    return f"by {event.actor}: " if event.actor else ""


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


def output_cell(output: Any) -> str:
    """A step output for one table cell; a big one's preview (core/values.py) leads with its
    size, which the cell would otherwise cut off."""
    if output is None:
        return ""
    if isinstance(output, dict) and output.get("truncated") is True and "preview" in output:
        size = output.get("bytes")
        return f"({size:,} bytes) {output['preview']}" if isinstance(size, int) else "(truncated)"
    return dumps(output)


def masked_report(report: Mapping[str, Any], sensitive: frozenset[str]) -> dict[str, Any]:
    """The report through the masker; ``sensitive`` param names apply inside step outputs
    (a tool's param may share a name with a field of the report itself)."""
    shown: dict[str, Any] = mask(report)
    for step, raw in zip(shown.get("steps") or [], report.get("steps") or [], strict=True):
        step["output"] = mask(raw.get("output"), sensitive)
    return shown


NO_CONSUMER_NOTES = ("no_consumer", "consumer_back")  # supervisor/consumers.py's notes


def consumer_warning(notes: Iterable[Mapping[str, str]]) -> str | None:
    """The no-consumer warning while it holds: the latest of its notes is not the all-clear."""
    latest: Mapping[str, str] | None = None
    for note in notes:
        if note.get("kind") in NO_CONSUMER_NOTES:
            latest = note
    if latest is None or latest.get("kind") != "no_consumer":
        return None
    since = clock(float(latest.get("at") or 0))
    return (
        f"no worker consumed queue {latest.get('queue', '?')} for "
        f"{latest.get('waited_s', '?')} s (noticed at {since}): start a worker on that queue"
    )


# supervisor/scheduling.py's notes: a step no live worker serves waits; a worker serves it
# now; the wait ended and the step failed.
UNSERVED_NOTES = ("unserved", "served", "unserved_failed")


def unserved_warnings(notes: Iterable[Mapping[str, str]]) -> list[str]:
    """One line per tool steps wait for, no live worker serving it (its latest note)."""
    latest: dict[str, Mapping[str, str]] = {}
    for note in notes:
        if note.get("kind") in UNSERVED_NOTES:
            latest[note.get("tool", "?")] = note
    return [
        f"no live worker serves {tool}: step {note.get('step', '?')} waits up to "
        f"{note.get('wait_s', '?')} s for one (noticed at {clock(float(note.get('at') or 0))}): "
        "start a worker whose PLANLOOP_TOOL_MODULES provides it"
        for tool, note in sorted(latest.items())
        if note.get("kind") == "unserved"
    ]


# --- status -------------------------------------------------------------------------------
def _snapshot(
    producer: Producer, sid: str
) -> tuple[SessionRecord, dict[str, StepState], dict[str, int]]:
    """The session, its steps' states and how many steps are in each status."""
    record = producer.session(sid)
    plan = load_session_plan(producer, record)
    states = producer.state.steps(sid, plan.step_ids if plan else [])
    return record, states, dict(Counter(st.status.value for st in states.values()))


def print_status(
    producer: Producer, sid: str | None, limit: int, *, console: Console | None = None
) -> None:
    """One session's status and step counts, or a table of the newest ``limit`` sessions.

    Raises:
        SessionNotFoundError: ``sid`` names no session.
    """
    console = console or make_console()
    if sid is None:
        _print_sessions(producer, limit, console)
        return
    record, states, counts = _snapshot(producer, sid)
    console.print(f"session      {record.id}")
    console.print("status       ", styled_status(record.status.value), sep="")
    console.print(f"goal         {short(record.goal, 100)}")
    console.print(f"owner        {record.owner or '-'} (epoch {record.epoch})")
    console.print(f"plan version {record.plan_version} (re-plans: {record.replans})")
    console.print(f"created      {clock(record.created_at)} ({age(record.created_at)} ago)")
    if record.error:
        console.print(f"error        {short(record.error, 200)}")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.print(f"steps        {len(states)}: {summary or 'none'}")
    notes = [n for _, n in producer.state.recent_progress(sid)]
    warnings = [w for w in [consumer_warning(notes), *unserved_warnings(notes)] if w]
    for warning in warnings if not record.status.ended else []:
        console.print(Text(f"WARNING      {terminal_safe(warning)}", style="bold yellow"))


def status_doc(producer: Producer, sid: str | None, limit: int) -> dict[str, Any]:
    """What ``status --json`` prints (masked): one session with its step counts and any
    no-consumer warning, or the newest ``limit`` sessions; the live workers either way.

    Raises:
        SessionNotFoundError: ``sid`` names no session.
    """
    from planloop.core.heartbeat import live_workers

    workers = [
        {"worker": hb.worker, "queues": hb.consumed(), "tools": hb.tools, "seen_at": hb.seen_at}
        for hb in live_workers(producer.state.r, producer.state.keys, producer.settings.queue)
    ]
    if sid is None:
        sessions = []
        for listed in producer.state.session_ids(limit):
            try:
                record = producer.session(listed)
            except SessionNotFoundError:
                continue  # listed but already cleaned up
            sessions.append(
                record.model_dump(
                    mode="json",
                    include={"id", "status", "goal", "plan_version", "replans", "created_at"},
                )
            )
        return cast(dict[str, Any], mask({"sessions": sessions, "workers": workers}))
    record, states, counts = _snapshot(producer, sid)
    notes = [n for _, n in producer.state.recent_progress(sid)]
    warning = consumer_warning(notes)
    waiting = unserved_warnings(notes)
    session = record.model_dump(mode="json", exclude={"report", "deliberation"})
    doc = {
        "session": session,
        "steps": {i: st.status.value for i, st in states.items()},
        "counts": counts,
        "warning": None if record.status.ended else warning,
        "unserved": [] if record.status.ended else waiting,
        "workers": workers,
    }
    return cast(dict[str, Any], mask(doc))


def workers_line(producer: Producer) -> str:
    """The live workers on this queue and their toolsets, or what to do when there are none."""
    from planloop.core.heartbeat import live_workers

    queue = producer.settings.queue
    workers = live_workers(producer.state.r, producer.state.keys, queue)
    if not workers:
        return f"no live worker on queue {queue}: start one with `planloop worker`"
    listed = "; ".join(f"{hb.worker} ({', '.join(hb.toolsets())})" for hb in workers)
    return terminal_safe(f"live workers on queue {queue}: {listed}")


def _print_sessions(producer: Producer, limit: int, console: Console) -> None:
    console.print(workers_line(producer), markup=False, highlight=False)
    sids = producer.state.session_ids(limit)
    if not sids:
        console.print("no sessions yet: submit one with `planloop submit PLAN_FILE`")
        return
    table = Table(title=f"newest {len(sids)} sessions", title_justify="left")
    for column in ("session", "status", "age", "plan v", "goal"):
        table.add_column(column)
    now = time.time()
    for sid in sids:
        try:
            record = producer.session(sid)
        except SessionNotFoundError:
            continue  # listed but already cleaned up
        table.add_row(
            sid,
            styled_status(record.status.value),
            age(record.created_at, now),
            str(record.plan_version),
            short(record.goal, 50),
        )
    console.print(table)


# --- report -------------------------------------------------------------------------------
def print_report(
    console: Console, report: Mapping[str, Any], sensitive: frozenset[str] = frozenset()
) -> None:
    """The final report (masked): a header line, then one row per step."""
    report = masked_report(report, sensitive)
    status = str(report.get("status", "?"))
    header = Text(f"report of {report.get('session_id', '?')}: ")
    header.append_text(styled_status(status))
    header.append(
        f" in {seconds(report.get('duration_s'))}, plan v{report.get('plan_version', 1)}, "
        f"{report.get('replans', 0)} re-plans"
    )
    console.print(header)
    if report.get("error") and status == "completed":
        # completed around failed steps (a fallback took over): a note, not an error
        console.print(Text(f"note: {terminal_safe(report['error'])}", style="yellow"))
    elif report.get("error"):
        console.print(f"error: {terminal_safe(report['error'])}")
    table = Table(show_lines=False)
    # the status and counts never wrap; names fold; error and output share what is left
    table.add_column("step", overflow="fold")
    table.add_column("tool", overflow="fold")
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("att", no_wrap=True, justify="right")
    table.add_column("duration", no_wrap=True, justify="right")
    table.add_column("worker", overflow="fold")
    table.add_column("error", overflow="fold", ratio=3)
    table.add_column("output", overflow="ellipsis", no_wrap=True, ratio=2)
    for step in report.get("steps", []):
        table.add_row(
            str(step.get("id", "")),
            str(step.get("tool", "")),
            styled_status(str(step.get("status", ""))),
            str(step.get("attempts", 0)),
            seconds(step.get("duration_s")),
            short(step.get("worker") or "", 24),
            short(step.get("error") or step.get("note") or "", 40),
            short(output_cell(step.get("output")), SHORT_OUTPUT),
        )
    console.print(table)
    counts = report.get("counts") or {}
    console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    for comp in report.get("compensations") or []:
        ok = comp.get("status") == "completed"
        line = f"compensation of {comp.get('step')} by {comp.get('tool')}: {comp.get('status')}"
        if not ok:
            line = f"COMPENSATION FAILED: {line} ({comp.get('error')})"
        console.print(Text(terminal_safe(line), style="green" if ok else "bold red"))
    print_conclusion(console, report)


def print_conclusion(console: Console, report: Mapping[str, Any]) -> None:
    """The critic's last verdict and the answer of a session with an LLM (none without)."""
    critique = report.get("critique")
    if isinstance(critique, Mapping):
        passed = bool(critique.get("passed"))
        verdict = "passed" if passed else "NOT passed"
        line = f"critique after {report.get('rounds', 1)} round(s): {verdict}"
        if critique.get("feedback"):
            line += f": {critique['feedback']}"
        console.print(Text(terminal_safe(line), style="green" if passed else "yellow"))
    answer = report.get("answer")
    if isinstance(answer, Mapping):
        notes = []
        if answer.get("partial"):  # the session did not complete: what it achieved, what not
            notes.append("partial: the session did not complete")
        if answer.get("source") == "planloop":
            notes.append("written without the model")
        label = f"answer ({'; '.join(notes)}): " if notes else "answer: "
        console.print(Text(label, style="bold").append(terminal_safe(answer.get("text", ""))))
        if answer.get("data") is not None:
            console.print(f"answer data: {json.dumps(answer['data'], default=str)}")
        if answer.get("schema_error"):
            error = terminal_safe(answer["schema_error"])
            console.print(Text(f"answer schema error: {error}", style="red"))


# --- show ---------------------------------------------------------------------------------
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
        }
        # the plan's sensitive names apply inside payloads and outputs, not to the doc's keys
        doc = {**mask(doc), "report": masked_report(report, hidden) if report else None}
        print(json.dumps(doc, indent=2, default=str))  # plain stdout: no rich markup or wrapping
        return
    console.print(f"session {sid}: ", styled_status(str(session.get("status", "?"))), sep="")
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
