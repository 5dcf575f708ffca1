"""The types of every number the ``planloop`` command line takes: finite and bounded.

``click.FloatRange`` lets ``nan`` through (every comparison with it is false) and ``inf`` when
there is no maximum; ``click.IntRange`` without a maximum takes a 20-digit ``--limit`` that
Redis or SQL then refuse with a traceback. Each type here has both ends, so an option out of
range or unparsable is exit 2 in one line (producer/cli/usage_errors.py), before anything runs.
The options that set a :class:`SessionOptions` field take its bounds from the model: the SDK
and the console accept exactly what the CLI does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import annotated_types
import click

from planloop.core.models import SessionOptions

# SQL integer keys (lessons): a larger id cannot exist, and SQLite refuses to bind one.
ROW_ID_MAX = 2**63 - 1
# Processes `planloop up` starts: each is a full Python process.
MAX_PROCESSES = 256
# Threads or processes of one worker.
MAX_WORKER_SLOTS = 10_000
# Sessions one `status` lists (each is a Redis read).
MAX_LISTED = 10_000
# Longest wait for a live worker, seconds (a day: longer is a job for a scheduler).
MAX_WAIT_S = 86_400.0


class BoundedFloat(click.ParamType[float, Any]):
    """A finite float in ``[low, high]`` (``low`` excluded with ``low_open``)."""

    name = "float"

    def __init__(self, low: float, high: float, *, low_open: bool = False) -> None:
        self.low, self.high, self.low_open = low, high, low_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool):
            self.fail("is not a number", param, ctx)
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{str(value)[:40]!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number", param, ctx)
        below = number <= self.low if self.low_open else number < self.low
        if below or number > self.high:
            self.fail(f"{value} is not in the range {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        return f"{self.low:g}{'<' if self.low_open else '<='}x<={self.high:g}"

    def __repr__(self) -> str:
        return f"BoundedFloat {self._range()}"


def bounded_int(low: int, high: int) -> click.IntRange:
    """An int in ``[low, high]`` (``1e26`` and ``nan`` are not ints: refused)."""
    return click.IntRange(min=low, max=high)


def row_id() -> click.IntRange:
    """The id of a SQL row: a positive 64-bit integer."""
    return bounded_int(1, ROW_ID_MAX)


def session_option(field: str) -> click.ParamType[Any, Any]:
    """The type of the CLI option that sets :class:`SessionOptions` field ``field``, with
    the model's own bounds.

    Raises:
        ValueError: the field has no lower and upper bound, or is not a number.
    """
    info = SessionOptions.model_fields[field]
    low: float | None = None
    high: float | None = None
    low_open = False
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Ge):
            low = float(rule.ge)  # type: ignore[arg-type]
        elif isinstance(rule, annotated_types.Gt):
            low, low_open = float(rule.gt), True  # type: ignore[arg-type]
        elif isinstance(rule, annotated_types.Le):
            high = float(rule.le)  # type: ignore[arg-type]
    if low is None or high is None:
        raise ValueError(f"SessionOptions.{field} needs both bounds for a CLI option")
    if "int" in str(info.annotation):
        return bounded_int(int(low) + (1 if low_open else 0), int(high))
    return BoundedFloat(low, high, low_open=low_open)


# Longest free text an option takes (a note, a reason, a lesson field), characters; the
# input check behind it (max_input_bytes) applies its own limit to what it sends.
MAX_TEXT_CHARS = 100_000
# Longest name an option or argument takes (a session, a step, a worker, a revision).
MAX_NAME_CHARS = 200
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class CliText(click.ParamType[str, Any]):
    """Text from the command line: not empty or blank, no control or escape character (one
    would reach a terminal, a log line or a Celery node name as typed), at most
    ``max_chars``; ``line`` refuses line breaks and tabs too (a name); ``empty_ok`` lets
    "" through (an option whose default is none of it: ``--note``). The value is never
    echoed: it may be a secret."""

    name = "text"

    def __init__(
        self, *, max_chars: int = MAX_TEXT_CHARS, line: bool = False, empty_ok: bool = False
    ) -> None:
        self.max_chars, self.line, self.empty_ok = max_chars, line, empty_ok

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from planloop.core.input_limits import text_problem

        if not isinstance(value, str):
            self.fail("must be text", param, ctx)
        if not value and self.empty_ok:
            return value
        if not value.strip():
            self.fail("must not be empty", param, ctx)
        if len(value) > self.max_chars:
            self.fail(f"{len(value)} characters, above the limit of {self.max_chars}", param, ctx)
        problem = text_problem(value)
        if problem is None and self.line:
            found = next((c for c in value if c in "\t\n\r\v\f"), None)
            problem = f"control character {found!r}" if found else None
        if problem:
            self.fail(problem, param, ctx)
        return value

    def __repr__(self) -> str:
        return f"CliText max_chars={self.max_chars}"


def text(*, empty_ok: bool = False) -> CliText:
    """Free text: a note, a reason, a goal, a lesson field."""
    return CliText(empty_ok=empty_ok)


def name(*, max_chars: int = MAX_NAME_CHARS, empty_ok: bool = False) -> CliText:
    """A name on one line: a session or step id, a worker or user name, a revision, an
    address, a comma list of queues or toolsets."""
    return CliText(max_chars=max_chars, line=True, empty_ok=empty_ok)


def log_level() -> click.Choice[str]:
    """A logging level, any case (an empty or unknown one is exit 2)."""
    return click.Choice(LOG_LEVELS, case_sensitive=False)


def readable_file() -> click.Path:
    """A file that exists and can be read (a directory is refused)."""
    return click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
