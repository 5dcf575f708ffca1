"""Redis faults a process rides out, and one log line per outage instead of one per attempt.

A fault is an error that says nothing about the data or the code, only that Redis is not
answering for now: the connection dropped or timed out, Redis is loading its dump after a
restart, or a stream or consumer group vanished (``FLUSHALL``, a restart without data).
Everything else (a Lua error, a wrong type) is a bug and is raised as usual.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import AuthenticationError, AuthorizationError, ReadOnlyError

# Replies that mean "the stream or group is gone": NOGROUP, or UNBLOCKED for a blocked read
# whose stream was deleted under it (Redis 7).
_GONE_REPLIES = ("NOGROUP", "UNBLOCKED")
# Replies that mean "Redis is not there yet", not "the command is wrong" (NOREPLICAS: a
# master with min-replicas-to-write and no replica in sync, e.g. during a failover).
_TRANSIENT_REPLIES = (*_GONE_REPLIES, "LOADING", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS")


def is_redis_fault(exc: BaseException) -> bool:
    """True when ``exc`` is a Redis fault to wait out (see the module docstring)."""
    # A wrong password or missing permission is a configuration error, not a fault: the
    # process exits (code 1) with the message. They derive from ConnectionError.
    if isinstance(exc, AuthenticationError | AuthorizationError):
        return False
    # BusyLoadingError (Redis loading its dump) is a ConnectionError.
    # READONLY: a master demoted by a failover, still reached by a kept connection.
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | ReadOnlyError):
        return True
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(_TRANSIENT_REPLIES)


def is_missing_group(exc: BaseException) -> bool:
    """True when a stream or its consumer group is gone (Redis lost its data)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(_GONE_REPLIES)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in each part of a sentinel URL)."""
    if ";" in url:
        return ";".join(redact_url(part) for part in url.split(";"))
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class Outage:
    """Tracks whether Redis answers, logging each change of state once, with a back-off.

    :meth:`failed` on every fault (WARNING on the first one only) returns how long to wait
    before the next try: ``first_s`` doubling up to ``max_s``. :meth:`over` after a call
    that went through (INFO once, with the outage's length, when there was one).
    """

    def __init__(
        self, url: str, log: logging.Logger, *, first_s: float = 0.1, max_s: float = 2.0
    ) -> None:
        self.url = redact_url(url)
        self.log = log
        self.first_s = first_s
        self.max_s = max_s
        self.since: float | None = None
        self._delay = first_s

    @property
    def down(self) -> bool:
        return self.since is not None

    def down_for(self) -> float:
        """Seconds since the outage began (0 when Redis answers)."""
        return 0.0 if self.since is None else time.monotonic() - self.since

    def failed(self, exc: BaseException) -> float:
        """Note a fault; the seconds to wait before trying again."""
        if self.since is None:
            self.since = time.monotonic()
            self._delay = self.first_s
            self.log.warning(
                "redis unreachable at %s (%s: %s), retrying",
                self.url,
                type(exc).__name__,
                exc,
            )
        else:
            self._delay = min(self.max_s, self._delay * 2)
        return self._delay

    def over(self) -> None:
        """Note a call that went through."""
        if self.since is not None:
            self.log.info("redis back after %.1f s at %s", self.down_for(), self.url)
            self.since = None
