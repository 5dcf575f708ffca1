"""Noticing that no worker consumes the step queue: one warning per episode, then its end.

The supervisor cannot see workers, only the queue: attempts that wait in it while it does not
shrink mean nobody takes messages (no worker started, all of them dead, or listening to
another queue). :class:`ConsumerWatch` is the pure bookkeeping of one session's view; the
watchdog feeds it the queue's length and what it learns about its own attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ConsumerNews(StrEnum):
    """What a look at the queue found worth telling."""

    NO_CONSUMER = "no_consumer"  # attempts wait and the queue has not shrunk for too long
    CONSUMER_BACK = "consumer_back"  # after a warning, a worker consumes again


@dataclass
class ConsumerWatch:
    """When a worker was last seen consuming, and whether this episode was warned about.

    Args:
        warn_after_s: seconds without consumption, attempts waiting, before the warning.
        since: when a worker was last seen consuming (or nothing waited).
    """

    warn_after_s: float
    since: float
    length: int | None = None  # the queue's length at the last look
    warned_at: float | None = None  # set while an episode that was warned about lasts

    def consumed(self, now: float) -> None:
        """A worker consumed (the queue shrank, or one of our attempts was claimed), or
        nothing of ours waits: the clock of an episode starts again."""
        self.since = now

    def look(self, now: float, length: int) -> None:
        """The queue's length now: shorter than at the last look means a worker consumes."""
        if length == 0 or (self.length is not None and length < self.length):
            self.consumed(now)
        self.length = length

    def due(self, now: float) -> bool:
        """Time to check our attempts and warn: nothing consumed for ``warn_after_s``."""
        return self.warned_at is None and now - self.since > self.warn_after_s

    def waited_s(self, now: float) -> float:
        return now - self.since

    def warn(self, now: float) -> None:
        self.warned_at = now

    def news(self) -> ConsumerNews | None:
        """CONSUMER_BACK once a warned episode ended (the warning state is reset)."""
        if self.warned_at is not None and self.since > self.warned_at:
            self.warned_at = None
            return ConsumerNews.CONSUMER_BACK
        return None
