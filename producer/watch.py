"""``planloop watch``: a live view of one session, polled from Redis until the session ends.

On a terminal it is a rich Live view (header, progress bar, step table, latest events); in a
pipe or CI log it prints one plain line per event and per step status change instead.
"""

from __future__ import annotations

import textwrap
import time
from collections import deque
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from planloop.core.llm_budget import budget_line, budget_view
from planloop.core.models import Event, SessionRecord, StepState, StepStatus
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.terminal import make_console, terminal_safe
from planloop.producer.views import (
    NO_CONSUMER_NOTES,
    SEVERITY_COLOURS,
    UNSERVED_NOTES,
    actor_text,
    clock,
    consumer_warning,
    event_line,
    load_session_plan,
    print_report,
    seconds,
    short,
    styled_status,
    unserved_warnings,
)

RECENT_EVENTS = 8
# Notes that set or clear the view's WARNING line (no consumer; a step no worker serves).
WARNING_NOTES = frozenset({*NO_CONSUMER_NOTES, *UNSERVED_NOTES})
# Note fields that carry a person-readable text: shown whole (wrapped), never cut.
LONG_FIELDS = frozenset({"reasoning", "reason", "error", "note", "feedback"})
NOTE_VALUE_CHARS = 60
# Width a plain note line wraps at when stdout is not a terminal (continuations indented).
PLAIN_WRAP = 160
# The supervisor notes a session's end just after marking it ended; wait this long for it.
END_NOTE_GRACE_S = 2.0


@dataclass
class WatchState:
    """What the view knows about the session so far; :func:`poll` refreshes it."""

    sid: str
    record: SessionRecord | None = None
    plan: Plan | None = None
    steps: dict[str, StepState] = field(default_factory=dict)
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    notes: deque[dict[str, str]] = field(default_factory=lambda: deque(maxlen=3))
    last_event: str = "-"
    last_note: str = "-"
    end_noted: bool = False
    ended_seen_at: float | None = None
    warning: str | None = None  # no worker consumes the queue (until the all-clear note)
    budget: str = ""  # LLM tokens and cost so far / budget; empty before any LLM call

    @property
    def ended_steps(self) -> int:
        return sum(1 for st in self.steps.values() if st.status.terminal)


@dataclass(frozen=True)
class Changes:
    """What one poll brought: new events, new progress notes, step status changes."""

    events: list[Event]
    notes: list[dict[str, str]]
    steps: list[tuple[str, StepState]]
    budget: str | None = None  # the LLM spend line, when it changed


def poll(producer: Producer, view: WatchState) -> Changes:
    """Read the session, its steps, and the events and notes after the last ones seen."""
    record = producer.session(view.sid)
    if view.plan is None or view.record is None or record.plan_version != view.record.plan_version:
        view.plan = load_session_plan(producer, record) or view.plan
    view.record = record
    spent = llm_spend_line(producer, record)
    budget_changed = spent if spent != view.budget else None
    view.budget = spent
    ids = view.plan.step_ids if view.plan is not None else []
    states = producer.state.steps(view.sid, ids)
    changed = [
        (i, st)
        for i, st in states.items()
        if i not in view.steps
        or (view.steps[i].status, view.steps[i].attempt) != (st.status, st.attempt)
    ]
    view.steps = states
    events = producer.state.events(view.sid, after=view.last_event)
    if events:
        view.last_event = events[-1][0]
        view.events.extend(ev for _, ev in events)
    notes = producer.state.progress(view.sid, after=view.last_note)
    if notes:
        view.last_note = notes[-1][0]
        view.notes.extend(fields for _, fields in notes)
        view.end_noted |= any(fields.get("kind") == "ended" for _, fields in notes)
        if any(fields.get("kind") in WARNING_NOTES for _, fields in notes):
            waiting = unserved_warnings(view.notes)
            view.warning = consumer_warning(view.notes) or (waiting[0] if waiting else None)
    return Changes(
        [ev for _, ev in events], [fields for _, fields in notes], changed, budget_changed
    )


def llm_spend_line(producer: Producer, record: SessionRecord) -> str:
    """``llm: tokens 1200/5000  cost $0.0012/-`` once the session made an LLM call."""
    options = record.options
    if not record.llm_usage and options.max_tokens is None and options.max_cost_usd is None:
        return ""
    return "llm: " + budget_line(budget_view(record.llm_usage, options, producer.settings))


# --- plain lines (no terminal) ------------------------------------------------------------
def step_time(state: StepState, now: float) -> float:
    """When the step reached its current status, as well as the hot state tells."""
    return state.finished_at or state.started_at or state.dispatched_at or now


def step_line(step_id: str, state: StepState, now: float) -> str:
    """One plain line for a step's status change, seen at ``now``."""
    line = (
        f"{clock(step_time(state, now))} step {step_id:<20} {state.status.value:<11} "
        f"attempt {state.attempt}"
    )
    if state.worker:
        line += f" on {terminal_safe(state.worker)}"
    if state.error:
        line += f": {short(state.error, 80)}"
    return line


def note_line(note: dict[str, str]) -> str:
    """One line for a progress note (``replan_required``, ``decision``, ``ended``, ...).

    Reasoning, reasons and errors are whole (a view wraps them); other values are cut. A
    session that ended completed around failed steps (a fallback took over) says so as a
    ``note``, not an ``error``.
    """
    fields = dict(note)
    if fields.get("kind") == "ended" and fields.get("status") == "completed":
        fields["note"] = fields.pop("error", "")
    extra = " ".join(
        f"{key}={short(value, 10_000 if key in LONG_FIELDS else NOTE_VALUE_CHARS)}"
        for key, value in fields.items()
        if key not in ("kind", "at") and value
    )
    at = clock(float(note.get("at") or 0))
    label = "WARNING note" if note.get("kind") in ("no_consumer", "unserved") else "note"
    kind = terminal_safe(note.get("kind", "?"))
    return " ".join(part for part in (at, label, kind, extra) if part)


def plain_lines(changes: Changes, now: float) -> list[str]:
    """The lines a non-terminal watch prints for one poll made at ``now``, oldest first.

    Steps still pending on their first attempt are left out: every step starts there.
    """
    timed = [
        (step_time(st, now), step_line(i, st, now))
        for i, st in changes.steps
        if st.attempt or st.status != StepStatus.PENDING
    ]
    timed += [(ev.occurred_at, event_line(ev)) for ev in changes.events]
    timed += [(float(n.get("at") or now), note_line(n)) for n in changes.notes]
    if changes.budget:
        timed.append((now, changes.budget))
    return [line for _, line in sorted(timed, key=lambda pair: pair[0])]


def wrap_line(line: str, width: int = PLAIN_WRAP) -> list[str]:
    """A plain line as printed: a long one (a decision's reasoning) wrapped at ``width``,
    its continuation lines indented, nothing cut."""
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False)


# --- the live view ------------------------------------------------------------------------
def render(view: WatchState) -> Group:
    """The whole live view of ``view``: header, progress bar, steps, events, notes."""
    return Group(_header(view), _progress(view), _steps_table(view), _events_table(view))


def _header(view: WatchState) -> Text:
    rec = view.record
    if rec is None:
        return Text(f"session {view.sid}")
    text = Text(f"session {rec.id}  ")
    text.append_text(styled_status(rec.status.value))
    text.append(
        f"  owner {rec.owner or '-'}  epoch {rec.epoch}  plan v{rec.plan_version}"
        f"  re-plans {rec.replans}\n"
    )
    text.append(f"goal: {short(rec.goal, 110)}")
    if view.budget:
        text.append(f"\n{view.budget}")
    if view.warning and not rec.status.ended:
        text.append(f"\nWARNING: {view.warning}", style="bold yellow")
    for note in view.notes:
        text.append("\n" + note_line(note), style="yellow")
    return text


def elapsed(record: SessionRecord | None, now: float) -> str:
    """``H:MM:SS`` since the session started (was created, before a supervisor took it),
    up to its end: a watch resumed later shows the session's own time, not the watch's."""
    if record is None or not record.created_at:
        return "-:--:--"
    start = record.started_at or record.created_at
    end = record.finished_at if record.status.ended and record.finished_at else now
    total = max(0, int(end - start))
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def _progress(view: WatchState) -> Progress:
    # The view is rebuilt on every poll, so the bar's own clock would start at each render:
    # the elapsed time is the session's, passed in as a field.
    bar = Progress(
        TextColumn("steps"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[progress.elapsed]{task.fields[elapsed]}"),
        expand=False,
    )
    total = len(view.plan.steps) if view.plan is not None else 0
    bar.add_task(
        "steps",
        total=total or None,
        completed=view.ended_steps,
        elapsed=elapsed(view.record, time.time()),
    )
    return bar


def _steps_table(view: WatchState) -> Table:
    table = Table(expand=False)
    for column in ("step", "tool", "status", "att", "duration", "worker", "error / note"):
        table.add_column(column)
    now = time.time()
    for step in view.plan.steps if view.plan is not None else []:
        st = view.steps.get(step.id, StepState())
        end = st.finished_at or (now if st.status == StepStatus.RUNNING else 0.0)
        duration = end - st.started_at if st.started_at and end else None
        table.add_row(
            step.id,
            terminal_safe(step.tool),
            styled_status(st.status.value),
            str(st.attempt),
            seconds(duration),
            short(st.worker, 24),
            short(st.error or st.note, 50),
        )
    return table


def _events_table(view: WatchState) -> Table:
    table = Table(title="latest events", title_justify="left", expand=False)
    for column in ("time", "type", "severity", "step"):
        table.add_column(column, no_wrap=True)
    table.add_column("description", overflow="fold")
    for ev in view.events:
        table.add_row(
            clock(ev.occurred_at),
            ev.type.value,
            Text(ev.severity.value, style=SEVERITY_COLOURS.get(ev.severity.value, "")),
            f"{ev.step_id}#{ev.attempt}" if ev.step_id else "",
            actor_text(ev) + short(ev.description, 400),
        )
    return table


# --- the loop -----------------------------------------------------------------------------
def watch_session(
    producer: Producer,
    sid: str,
    *,
    console: Console | None = None,
    poll_s: float = 0.1,
    timeout_s: float | None = None,
) -> str:
    """Show session ``sid`` until it ends (or ``timeout_s`` passes); return its status value.

    1. Poll Redis: session, steps, new events, new progress notes.
    2. Show them: refresh the Live view on a terminal, else print plain lines.
    3. Stop once the session has ended; print the final report.

    Raises:
        SessionNotFoundError: no session ``sid``.
    """
    console = console or make_console()
    view = WatchState(sid)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    changes = poll(producer, view)
    assert view.record is not None
    if not console.is_terminal:
        # Plain lines even for a session that is already over: a log (or CI) shows what
        # happened, however fast it went.
        _watch_plain(producer, view, changes, console, poll_s, deadline)
    elif not view.record.status.ended:
        _watch_live(producer, view, console, poll_s, deadline)
    record = producer.session(sid)
    if record.report is not None:
        print_report(console, record.report)
    elif not record.status.ended:
        console.print(f"session {sid} is still {record.status.value} (stopped watching)")
    return record.status.value


def _running(view: WatchState, deadline: float | None) -> bool:
    """Keep polling: in time, and the session has not ended (or its end note is still due)."""
    assert view.record is not None
    now = time.monotonic()
    if deadline is not None and now >= deadline:
        return False
    if not view.record.status.ended:
        return True
    if view.end_noted:
        return False
    if view.ended_seen_at is None:
        view.ended_seen_at = now
    return now - view.ended_seen_at < END_NOTE_GRACE_S


def _watch_live(
    producer: Producer, view: WatchState, console: Console, poll_s: float, deadline: float | None
) -> None:
    with Live(render(view), console=console, refresh_per_second=10, transient=False) as live:
        while _running(view, deadline):
            time.sleep(poll_s)  # polling interval of the view, not a wait on state
            poll(producer, view)
            live.update(render(view))


def _watch_plain(
    producer: Producer,
    view: WatchState,
    first: Changes,
    console: Console,
    poll_s: float,
    deadline: float | None,
) -> None:
    assert view.record is not None
    status, goal = view.record.status.value, short(view.record.goal, 80)
    console.print(f"watching {view.sid} ({status}): {goal}", markup=False, highlight=False)
    changes = first
    while True:
        for line in plain_lines(changes, time.time()):
            for part in wrap_line(line):
                console.print(part, markup=False, highlight=False, soft_wrap=True)
        if not _running(view, deadline):
            return
        time.sleep(poll_s)  # polling interval of the view, not a wait on state
        changes = poll(producer, view)
