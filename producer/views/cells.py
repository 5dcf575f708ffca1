"""How one value of a view is written: a status in colour, a short text, a time, an age, an
event as one line, a step output as a cell."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text

from planloop.core.hot_state import dumps
from planloop.core.masking import mask_text
from planloop.core.models import Event
from planloop.producer.terminal import terminal_safe

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


def output_cell(output: Any) -> str:
    """A step output for one table cell; a big one's preview (core/values.py) leads with its
    size, which the cell would otherwise cut off."""
    if output is None:
        return ""
    if isinstance(output, dict) and output.get("truncated") is True and "preview" in output:
        size = output.get("bytes")
        return f"({size:,} bytes) {output['preview']}" if isinstance(size, int) else "(truncated)"
    return dumps(output)
