"""``planloop status``: one session and its step counts, or the newest sessions, and the
live workers."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, cast

from rich.console import Console
from rich.table import Table
from rich.text import Text

from planloop.core.errors import SessionNotFoundError
from planloop.core.masking import mask
from planloop.core.models import SessionRecord, StepState
from planloop.producer.client import Producer
from planloop.producer.terminal import make_console, terminal_safe
from planloop.producer.views.cells import age, clock, short, styled_status
from planloop.producer.views.masked import load_session_plan
from planloop.producer.views.notes import consumer_warning, unserved_warnings


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
