"""Exit codes of the ``planloop`` command line, and the one line an unreachable service gets.

==  ==========================================================================================
0   success (a watched session ended ``completed``)
1   a watched session ended ``failed``, ``aborted`` or ``cancelled`` (or a server stopped on
    an error)
2   bad input: a malformed or invalid plan, an unknown tool, bad options or settings, a tool
    no live worker serves; nothing was submitted
3   Redis or the database is unreachable: the line names the URL (password masked) and what
    to do
==  ==========================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from planloop.core.redis_faults import redact_url

EXIT_OK = 0
EXIT_SESSION_FAILED = 1
EXIT_INVALID = 2
EXIT_UNREACHABLE = 3

REASON_CHARS = 160


@dataclass(frozen=True)
class Unreachable:
    """Which service did not answer, at which URL, and why (one line each)."""

    service: str
    url: str
    reason: str
    setting: str

    def message(self) -> str:
        return (
            f"cannot reach {self.service} at {redact_url(self.url)} ({self.reason}): "
            f"start it, or point {self.setting} at one that runs"
        )


def _reason(exc: BaseException) -> str:
    """The cause in one short line (the driver's first line; SQLAlchemy's text leaves out its
    statement and background link)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def unreachable(exc: BaseException, redis_url: str, database_url: str) -> Unreachable | None:
    """What ``exc`` says is unreachable, or None when it is not about reaching a service.

    A Redis connection error or time-out (loading its dump included), a server there that
    does not speak Redis, or the database's
    driver failing to connect (SQLAlchemy's ``OperationalError``/``InterfaceError``).
    """
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return Unreachable("Redis", redis_url, _reason(exc), "PLANLOOP_REDIS_URL")
    if isinstance(exc, redis.InvalidResponse):  # something answers there, not Redis
        reason = f"what answers is not Redis: {_reason(exc)}"
        return Unreachable("Redis", redis_url, reason, "PLANLOOP_REDIS_URL")
    if type(exc).__module__.startswith("sqlalchemy"):
        from sqlalchemy.exc import InterfaceError, OperationalError

        if isinstance(exc, OperationalError | InterfaceError):
            return Unreachable("the database", database_url, _reason(exc), "PLANLOOP_DATABASE_URL")
    return None
