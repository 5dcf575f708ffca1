"""The supervisor's SQL writes the store refused, held until it recovers.

While the record's disk is full (or its database locked, or down), a checkpoint, a claim or
a session's report cannot commit. Failing the session loop for it would lose the rows of
that round: the loop starts again from Redis, and what the round carried (the rows of the
attempts the store failed, their events) is in no later checkpoint. So the writers
(supervisor/io/group_commit.py) hold a refused round instead, whole, ahead of what the
session queues next, and commit it on the next try; its events stay unacknowledged until
then, so a supervisor that dies meanwhile leaves them to the next owner.
:class:`StoreOutage` paces the tries and logs one line when the store starts refusing and
one when it writes again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from planloop.core.record.faults import store_cause

log = logging.getLogger(__name__)


class StoreOutage:
    """One outage of the SQL store as the supervisor's writers see it."""

    def __init__(self, what: str, retry_s: float) -> None:
        self.what = what  # "checkpoints", "claims": named in the log lines
        self.retry_s = retry_s
        self._since = 0.0  # when the store first refused (0: it writes)
        self.refusals = 0  # rounds refused in this outage

    @property
    def ongoing(self) -> bool:
        return self._since > 0

    def refused(self, exc: BaseException, sessions: int) -> None:
        """The store refused a round of ``sessions`` sessions' writes: held, tried again."""
        self.refusals += 1
        if self._since:
            return
        self._since = time.monotonic()
        log.warning(
            "sql store refused the %s of %d session(s) (%s): held and written once it "
            "recovers, tried every %.1fs",
            self.what,
            sessions,
            store_cause(exc),
            self.retry_s,
        )

    def wrote(self) -> None:
        """A round committed: an outage in progress is over."""
        if not self._since:
            return
        log.warning(
            "sql store writes %s again after %.1fs (%d refused round(s) held and written)",
            self.what,
            time.monotonic() - self._since,
            self.refusals,
        )
        self._since, self.refusals = 0.0, 0

    async def pause(self) -> None:
        """Wait before the next try."""
        await asyncio.sleep(self.retry_s)


def pass_on(waiting: asyncio.Future[None], done: asyncio.Future[None]) -> None:
    """Tell the waiters of a refused round (``waiting``) that the round it was combined
    into is ``done`` (committed, or dropped with its session)."""
    if waiting.done():
        return
    if done.cancelled():
        waiting.cancel()
    else:
        waiting.set_result(None)
