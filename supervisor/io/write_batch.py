"""Fenced writes of many sessions in one Redis pipeline: the calls made in one event-loop turn.

Each fenced write is one script call. Sent one by one, every call costs the event loop a
connection taken from the pool and given back, a send and a wake-up for its reply; when a
thousand sessions start together (or their steps end together), each write also waits its
own lap of the loop before its reply is read. :class:`WriteBatch` collects the calls made
during one turn of the loop and sends them as one pipeline (not a transaction: each script
is atomic on its own and fenced by its own session's epoch), so a burst of writes is one
round trip, and each caller gets its own reply or error.

Pure asyncio bookkeeping around a ``send`` function: unit-tested without Redis
(tests/unit/test_write_batch.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

C = TypeVar("C")
MAX_BATCH = 500  # calls per pipeline: a script holds Redis for its whole run

# Sends calls in one round trip; per call, its reply or the error Redis answered it with.
Send = Callable[[Sequence[C]], Awaitable[Sequence[object]]]


class WriteBatch(Generic[C]):
    """Runs calls through ``send`` in batches of whatever was asked in one loop turn."""

    def __init__(self, send: Send[C], max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"a write batch holds at least one call (got {max_batch})")
        self._send = send
        self._max_batch = max_batch
        self._pending: list[tuple[C, asyncio.Future[object]]] = []
        self._flushing: set[asyncio.Task[None]] = set()

    async def run(self, call: C) -> object:
        """``call``'s reply, sent with the other calls of this loop turn; raises the error
        Redis answered it with, or the one that failed the whole round trip."""
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if not self._pending:
            # Its first step comes after every callback already queued for this turn: the
            # calls they make join. It sends right then, not from a task of its own (a
            # second hop, one more lap of a busy loop before the write leaves).
            task = asyncio.ensure_future(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        self._pending.append((call, done))
        return await done

    async def _flush(self) -> None:
        # A caller cancelled before its call left is dropped: nothing was sent for it.
        pending = [(c, f) for c, f in self._pending if not f.done()]
        self._pending = []
        size = self._max_batch
        batches = [pending[start : start + size] for start in range(0, len(pending), size)]
        if len(batches) == 1:
            await self._send_batch(batches[0])
        elif batches:
            await asyncio.gather(*(self._send_batch(batch) for batch in batches))

    async def _send_batch(self, batch: list[tuple[C, asyncio.Future[object]]]) -> None:
        try:
            replies = await self._send([call for call, _ in batch])
        except asyncio.CancelledError:  # the process stops: so do the callers
            for _, done in batch:
                done.cancel()
            raise
        except Exception as exc:  # the round trip failed: every caller gets why
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        if len(replies) != len(batch):
            error = RuntimeError(f"{len(replies)} replies to {len(batch)} batched calls")
            for _, done in batch:
                if not done.done():
                    done.set_exception(error)
            return
        for (_, done), reply in zip(batch, replies, strict=True):
            if done.done():  # the caller was cancelled meanwhile; its write happened anyway
                continue
            if isinstance(reply, BaseException):
                done.set_exception(reply)
            else:
                done.set_result(reply)
