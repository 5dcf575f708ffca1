"""The plain views: report table, Mermaid block, and the line format of a non-terminal watch."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import cast

from rich.console import Console

from planloop.config.settings import ModelPrice, Settings
from planloop.core.models import (
    Event,
    EventType,
    SessionOptions,
    SessionRecord,
    SessionStatus,
    Severity,
    StepState,
    StepStatus,
)
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.views import event_line, mermaid_block, print_report, report_statuses, short
from planloop.producer.watch import (
    Changes,
    WatchState,
    llm_spend_line,
    note_line,
    plain_lines,
    render,
    step_line,
)

PLAN = parse_plan(
    """
goal: two steps
steps:
  - {id: fetch, tool: bench.echo, params: {value: 1}}
  - {id: store, tool: bench.echo, params: {value: "{{fetch.output.value}}"}, dependencies: [fetch]}
"""
)

REPORT = {
    "session_id": "20260101-000000-abcdef12",
    "goal": "two steps",
    "status": "failed",
    "error": "critical step store failed: PermanentToolError: disk full",
    "plan_version": 1,
    "replans": 0,
    "duration_s": 1.5,
    "counts": {"completed": 1, "failed": 1},
    "steps": [
        {
            "id": "fetch",
            "tool": "bench.echo",
            "status": "completed",
            "attempts": 1,
            "worker": "host:42",
            "duration_s": 0.25,
            "error": None,
            "note": None,
            "output": {"value": 1},
        },
        {
            "id": "store",
            "tool": "bench.echo",
            "status": "failed",
            "attempts": 3,
            "worker": "host:42",
            "duration_s": 0.1,
            "error": "PermanentToolError: disk full",
            "note": None,
            "output": None,
        },
    ],
}


def _recorded(width: int = 120) -> Console:
    return Console(record=True, width=width, color_system=None)


def test_report_lists_every_step_with_status_attempts_and_error() -> None:
    console = _recorded()
    print_report(console, REPORT)
    text = console.export_text()
    assert "report of 20260101-000000-abcdef12: failed in 1.50s" in text
    assert "error: critical step store failed" in text
    fetch_row = next(line for line in text.splitlines() if "fetch" in line)
    store_row = next(line for line in text.splitlines() if "store" in line and "│" in line)
    assert "completed" in fetch_row
    assert '{"value":1}' in fetch_row
    assert "0.25s" in fetch_row
    assert "failed" in store_row
    assert " 3 " in store_row
    assert "disk full" in text
    assert text.rstrip().endswith("1 completed, 1 failed")


def test_report_cuts_long_outputs_to_one_line() -> None:
    report = {**REPORT, "steps": [{**REPORT["steps"][0], "output": {"blob": "x" * 500}}]}
    console = _recorded()
    print_report(console, report)
    row = next(line for line in console.export_text().splitlines() if "fetch" in line)
    assert "xxxx" in row
    assert "x" * 100 not in row


def test_mermaid_block_colours_steps_by_report_status() -> None:
    block = mermaid_block(PLAN, report_statuses(REPORT))
    lines = block.splitlines()
    assert lines[0] == "```mermaid"
    assert lines[1] == "flowchart TD"
    assert lines[-1] == "```"
    assert '    s0["fetch<br/>bench.echo<br/>completed"]:::completed' in lines
    assert '    s1["store<br/>bench.echo<br/>failed"]:::failed' in lines
    assert "    s0 --> s1" in lines


def test_event_line_names_type_severity_step_and_attempt() -> None:
    event = Event(
        type=EventType.TASK_FAILED,
        severity=Severity.WARNING,
        step_id="store",
        attempt=2,
        description="TransientToolError:\n  broker went away",
        occurred_at=time.mktime((2026, 1, 1, 12, 30, 5, 0, 0, -1)) + 0.25,
    )
    line = event_line(event)
    assert line.startswith("12:30:05.250 TASK_FAILED")
    assert "WARNING" in line
    assert "store#2" in line
    assert line.endswith("TransientToolError: broker went away")
    assert "\n" not in line


def test_plain_watch_lines_are_time_ordered_and_skip_initial_pending() -> None:
    t0 = time.mktime((2026, 1, 1, 9, 0, 0, 0, 0, -1))
    done = StepState(
        status=StepStatus.COMPLETED, attempt=1, worker="w:1", started_at=t0, finished_at=t0 + 2
    )
    retrying = StepState(
        status=StepStatus.READY, attempt=1, error="TransientToolError: blip", finished_at=t0 + 1
    )
    changes = Changes(
        events=[
            Event(type=EventType.TASK_COMPLETED, step_id="fetch", attempt=1, occurred_at=t0 + 2)
        ],
        notes=[{"kind": "ended", "at": repr(t0 + 3), "status": "completed", "error": ""}],
        steps=[("fetch", done), ("store", retrying), ("later", StepState())],
    )
    lines = plain_lines(changes, now=t0 + 5)
    assert len(lines) == 4
    assert (
        lines[0]
        == "09:00:01.000 step store                ready       attempt 1: TransientToolError: blip"
    )
    assert lines[1].startswith("09:00:02.000 step fetch")
    assert lines[1].endswith("completed   attempt 1 on w:1")
    assert "TASK_COMPLETED" in lines[2]
    assert lines[3] == "09:00:03.000 note ended status=completed"
    assert all("\x1b" not in line for line in lines)


def test_step_line_without_timestamps_uses_now() -> None:
    now = time.mktime((2026, 1, 1, 9, 0, 7, 0, 0, -1))
    line = step_line("a", StepState(status=StepStatus.RUNNING, attempt=1), now)
    assert line.startswith("09:00:07.000 step a ")


def test_note_line_shows_fields_but_not_empty_ones() -> None:
    line = note_line(
        {"kind": "replan_required", "at": "0", "reason": "budget", "count": "2", "x": ""}
    )
    assert line == "note replan_required reason=budget count=2"


def test_short_flattens_and_cuts() -> None:
    assert short("a\n  b", 10) == "a b"
    assert short("abcdefghijkl", 5) == "abcd…"
    assert short(None) == ""


def test_plan_diff_names_added_removed_and_changed_steps() -> None:
    from planloop.planner.plan import parse_plan
    from planloop.producer.history import plan_diff

    old = parse_plan(
        """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a]}
  - {id: c, tool: bench.echo, dependencies: [a]}
"""
    )
    new = parse_plan(
        """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 3}, dependencies: [a]}
  - {id: d, tool: bench.sleep, dependencies: [a]}
"""
    )
    assert plan_diff(old, new) == [
        "+ d (bench.sleep)",
        "- c (bench.echo)",
        "~ b: params changed",
    ]


def test_watch_shows_llm_tokens_and_cost_against_the_budget() -> None:
    settings = Settings(llm_prices={"m": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)})
    producer = cast(Producer, SimpleNamespace(settings=settings))
    record = SessionRecord(
        id="s", options=SessionOptions(max_tokens=5000), llm_usage={"m": [1000, 500]}
    )
    line = llm_spend_line(producer, record)
    assert line == "llm: tokens 1500/5000  cost $0.0020/-"
    assert llm_spend_line(producer, SessionRecord(id="s")) == ""  # no LLM, no budget: no line
    now = time.mktime((2026, 1, 1, 9, 0, 0, 0, 0, -1))
    lines = plain_lines(Changes(events=[], notes=[], steps=[], budget=line), now=now)
    assert lines == [line]
    view = WatchState("s", record=record, budget=line)
    console = Console(width=120, record=True)
    console.print(render(view))
    assert line in console.export_text()


# --- watch -----------------------------------------------------------------------------------
LONG_REASONING = (
    "verify_primary failed for good (the primary supplier cannot deliver) and declares a "
    "fallback; injecting it keeps the restock going with the best rated alternative supplier, "
    "whose order still needs an approval of its amount before anything is bought"
)


def test_watch_elapsed_counts_from_the_session_start_until_its_end() -> None:
    from planloop.producer.watch import elapsed

    record = SessionRecord(id="s", status=SessionStatus.RUNNING, created_at=100.0)
    assert elapsed(record, now=100.0 + 3725) == "1:02:05"
    started = record.model_copy(update={"started_at": 160.0})
    assert elapsed(started, now=225.0) == "0:01:05"
    ended = started.model_copy(update={"status": SessionStatus.COMPLETED, "finished_at": 190.0})
    assert elapsed(ended, now=10_000.0) == "0:00:30"
    assert elapsed(None, now=1.0) == "-:--:--"


def test_live_view_shows_the_session_elapsed_time_and_whole_reasoning() -> None:
    view = WatchState(
        "s",
        record=SessionRecord(
            id="s", status=SessionStatus.RUNNING, created_at=time.time() - 65, goal="g"
        ),
        plan=PLAN,
    )
    view.notes.append(
        {"kind": "decision", "at": "0", "action": "REPLAN_REMAINING", "reasoning": LONG_REASONING}
    )
    console = Console(width=80, record=True, force_terminal=False)
    console.print(render(view))
    text = console.export_text()
    assert "0:01:0" in text  # 65 s and counting, not 0:00:00
    assert " ".join(LONG_REASONING.split()) in " ".join(text.replace("│", " ").split())
    assert "…" not in text


def test_note_line_keeps_reasoning_whole_and_plain_lines_wrap_it() -> None:
    from planloop.producer.watch import wrap_line

    line = note_line({"kind": "decision", "at": "0", "reasoning": LONG_REASONING})
    assert line.endswith(LONG_REASONING)
    parts = wrap_line(line, width=80)
    assert len(parts) > 1
    assert all(len(p) <= 80 for p in parts)
    assert all(p.startswith("    ") for p in parts[1:])
    assert " ".join(p.strip() for p in parts) == line


def test_a_completed_session_around_failed_steps_reads_as_a_note() -> None:
    ended = note_line(
        {
            "kind": "ended",
            "at": "0",
            "status": "completed",
            "error": "completed around failed steps: verify_primary",
        }
    )
    assert ended == "note ended status=completed note=completed around failed steps: verify_primary"
    console = Console(width=160, record=True)
    print_report(
        console,
        {**REPORT, "status": "completed", "error": "completed around failed steps: store"},
    )
    text = console.export_text()
    assert "note: completed around failed steps: store" in text
    assert "error: completed" not in text


def test_show_and_watch_name_who_asked_for_a_persons_event() -> None:
    asked = Event(
        type=EventType.EXTERNAL_SIGNAL,
        description="looks right",
        payload={"command": "approve", "step": "b"},
        actor="otto",
    )
    assert event_line(asked).endswith("by otto: looks right")
    assert "by " not in event_line(Event(type=EventType.TASK_COMPLETED, step_id="a"))
    view = WatchState("s", record=None, plan=PLAN)
    view.events.append(asked)
    console = Console(width=120, record=True, force_terminal=False)
    console.print(render(view))
    assert "by otto: looks right" in console.export_text()


def test_an_events_actor_survives_the_stream_fields_and_is_left_out_when_none() -> None:
    asked = Event(type=EventType.NEW_CONSTRAINT, description="budget", actor="carol")
    assert Event.from_fields(asked.to_fields()).actor == "carol"
    assert "actor" not in Event(type=EventType.TASK_COMPLETED).to_fields()
