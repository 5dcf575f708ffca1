"""Log set-up of the entry points: human lines (default) or one JSON object per line.

With ``PLANLOOP_LOG_FORMAT=json`` each line is an object with ``ts``, ``level``, ``logger``,
``message``, and ``session_id`` / ``step_id`` / ``attempt`` when the line is about a session:
taken from ``extra=``, else from the context a session loop or a step attempt runs in
(:func:`bind`), else from the ``session=… step=… attempt=…`` words the house log style puts in
messages. Every line passes the one masker first (core/masking.py).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from planloop.core.masking import install_log_masking, mask_text

LogFormat = Literal["human", "json"]

HUMAN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_SESSION: ContextVar[str | None] = ContextVar("planloop_session_id", default=None)
_STEP: ContextVar[str | None] = ContextVar("planloop_step_id", default=None)
_WORDS = {
    "session_id": re.compile(r"\bsession=([\w.:-]+)"),
    "step_id": re.compile(r"\bstep=([\w.:-]+)"),
    "attempt": re.compile(r"\battempt=(\d+)"),
}


def bind(session_id: str | None, step_id: str | None = None) -> None:
    """Name the session (and step) the current context works on, for JSON log lines.

    An asyncio task or a thread has a context of its own, so a session loop's task binds once.
    """
    _SESSION.set(session_id)
    _STEP.set(step_id)


@contextmanager
def bound(session_id: str | None, step_id: str | None = None) -> Iterator[None]:
    """:func:`bind` for the length of a block (a step attempt on a pool thread)."""
    session_token, step_token = _SESSION.set(session_id), _STEP.set(step_id)
    try:
        yield
    finally:
        _SESSION.reset(session_token)
        _STEP.reset(step_token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (keys in a fixed order; the message already masked)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        context = {"session_id": _SESSION.get(), "step_id": _STEP.get()}
        for key, pattern in _WORDS.items():
            value = getattr(record, key, None)
            if value is None:
                value = context.get(key)
            if value is None:
                found = pattern.search(message)
                value = found.group(1) if found else None
            if value is not None:
                doc[key] = int(value) if key == "attempt" else str(value)
        if record.exc_info:
            doc["exception"] = record.exc_text or mask_text(self.formatException(record.exc_info))
        return json.dumps(doc, ensure_ascii=False, default=str)


def formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter of ``fmt`` lines."""
    return JsonFormatter() if fmt == "json" else logging.Formatter(HUMAN_FORMAT)


def use_format(logger: logging.Logger, fmt: LogFormat) -> None:
    """Give every handler of ``logger`` the ``fmt`` formatter (Celery's own set-up included)
    and the masker; human lines keep the formatter they have."""
    for handler in logger.handlers:
        if fmt == "json":
            handler.setFormatter(JsonFormatter())
    install_log_masking(logger)


def setup_logging(level: str, fmt: LogFormat = "human") -> None:
    """Log to stderr at ``level`` in ``fmt`` (an entry point's one call)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
    install_log_masking()  # log lines pass the one masker too (core/masking.py)
