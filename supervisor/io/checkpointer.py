"""A session's handle on the process's checkpoint writer (supervisor/io/group_commit.py).

The session loop hands over each batch and goes on dispatching: SQL latency (an fsync on
SQLite) never sits between a step's outcome and its dependents' start. Events are
acknowledged only after the batch that applied them is committed, so a crash before the
commit leaves them pending for the next owner. The commits themselves are grouped across
every session the supervisor holds (see :class:`supervisor.group_commit.CheckpointWriter`).
"""

from __future__ import annotations

from planloop.core.record import Checkpoint
from planloop.supervisor.io.group_commit import Pending, merge
from planloop.supervisor.process.context import SupervisorContext

__all__ = ["Checkpointer", "merge"]


class Checkpointer:
    """One session's checkpoints, written by the process's group-commit writer."""

    def __init__(self, ctx: SupervisorContext, sid: str, epoch: int) -> None:
        self.writer = ctx.checkpoints
        self.sid = sid
        self.epoch = epoch
        self._last: Pending | None = None  # the newest round this session joined
        self.writer.open(sid, epoch)

    @property
    def error(self) -> BaseException | None:
        """The first failure of a round this session joined (a fenced-out epoch, say)."""
        return self.writer.error_of(self.sid, self.epoch)

    def submit(self, batch: Checkpoint, acks: list[str]) -> None:
        """Queue ``batch``; its ``acks`` are acknowledged once it is committed."""
        if not batch and not acks:
            return
        self._last = self.writer.submit(self.sid, self.epoch, batch, acks)

    def raise_if_failed(self) -> None:
        """Re-raise a failure of the writer (a fenced-out epoch stops the session loop)."""
        if self.error is not None:
            raise self.error

    async def flush(self, *, hurry: bool = True) -> None:
        """Wait until everything submitted so far is committed and acknowledged; without
        ``hurry``, with the round it joined (grouped with other sessions' batches)."""
        if self._last is not None:
            await self.writer.wait(self._last, hurry=hurry)
        self.raise_if_failed()

    async def close(self) -> None:
        """Drop what was queued and not taken yet; a round in progress ends by itself (a
        stale epoch is fenced out there)."""
        self.writer.close_session(self.sid, self.epoch)
