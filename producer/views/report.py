"""A session's final report in the terminal: one row per step, then its conclusion."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from planloop.producer.terminal import terminal_safe
from planloop.producer.views.cells import SHORT_OUTPUT, output_cell, seconds, short, styled_status
from planloop.producer.views.masked import masked_report


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
    table.add_column("error / note", overflow="fold", ratio=3)
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
