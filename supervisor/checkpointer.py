"""Writes a session's checkpoints to SQL in the background, then acknowledges their events.

The session loop hands over each batch and goes on dispatching: SQL latency (an fsync on
SQLite) never sits between a step's outcome and its dependents' start. Events are
acknowledged only after the batch that applied them is committed, so a crash before the
commit leaves them pending for the next owner.

Group commit: the writer waits until the session has been quiet for
``checkpoint_linger_s`` (no new changes), or until ``MAX_LINGER_S`` has passed, and then
commits everything at once. A burst of outcomes and dispatches becomes one commit after
the burst instead of several that compete with it for the process; under sustained load
the commits are large and few.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from core.errors import FencedOutError
from core.record import Checkpoint
from supervisor.context import SupervisorContext

log = logging.getLogger(__name__)

MAX_LINGER_S = 0.25  # no change waits longer than this for its commit (and its ack)


def merge(into: Checkpoint, batch: Checkpoint) -> None:
    """Append ``batch`` to ``into`` (later values win for the same rows)."""
    into.session.update(batch.session)
    into.attempts += batch.attempts
    into.events += batch.events
    into.plan_versions += batch.plan_versions
    into.decisions += batch.decisions
    into.llm_calls += batch.llm_calls
    into.blobs.update(batch.blobs)


class Checkpointer:
    """One background writer per session; batches queued while it writes are coalesced."""

    def __init__(self, ctx: SupervisorContext, sid: str, epoch: int) -> None:
        self.ctx = ctx
        self.sid = sid
        self.epoch = epoch
        self._queue: asyncio.Queue[tuple[Checkpoint, list[str]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self._acked_since_trim = 0
        self._flushing = asyncio.Event()  # set while someone waits: no lingering then
        self._submitted = 0
        self._stored: set[str] = set()  # output digests this writer committed to SQL

    def submit(self, batch: Checkpoint, acks: list[str]) -> None:
        """Queue ``batch``; its ``acks`` are acknowledged once it is committed."""
        if not batch and not acks:
            return
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"checkpoint:{self.sid}")
        self._queue.put_nowait((batch, acks))
        self._submitted += 1

    def raise_if_failed(self) -> None:
        """Re-raise a failure of the writer (a fenced-out epoch stops the session loop)."""
        if self.error is not None:
            raise self.error

    async def flush(self) -> None:
        """Wait until everything submitted so far is committed and acknowledged."""
        if self._task is not None:
            self._flushing.set()
            try:
                await self._queue.join()
            finally:
                self._flushing.clear()
        self.raise_if_failed()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            batch, acks = await self._queue.get()
            await self._linger()
            taken = 1
            while not self._queue.empty():
                more, more_acks = self._queue.get_nowait()
                merge(batch, more)
                acks += more_acks
                taken += 1
            try:
                if self.error is None:
                    await self._write(batch, acks)
            except FencedOutError as exc:
                self.error = exc
            except Exception as exc:  # kept for the loop to raise; nothing is acknowledged
                log.exception("session=%s checkpoint failed", self.sid)
                self.error = exc
            finally:
                for _ in range(taken):
                    self._queue.task_done()

    async def _linger(self) -> None:
        """Wait for a quiet spell of ``checkpoint_linger_s``, at most ``MAX_LINGER_S``."""
        quiet = self.ctx.settings.checkpoint_linger_s
        if quiet <= 0:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + MAX_LINGER_S
        while not self._flushing.is_set():
            left = give_up - loop.time()
            if left <= 0:
                return
            seen = self._submitted
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._flushing.wait(), min(quiet, left))
            if self._submitted == seen:
                return

    async def _write(self, batch: Checkpoint, acks: list[str]) -> None:
        await self._fill_outputs(batch)
        if batch:
            await self.ctx.sql(lambda: self.ctx.record.checkpoint(self.sid, self.epoch, batch))
            self._stored.update(batch.blobs)
        await self.ctx.store.ack(self.sid, acks)
        self._acked_since_trim += len(acks)
        keep = self.ctx.settings.stream_keep
        if self._acked_since_trim >= max(1, keep // 10):
            self._acked_since_trim = 0
            await self.ctx.store.trim_events(self.sid, keep)

    async def _fill_outputs(self, batch: Checkpoint) -> None:
        """Completed attempts' outputs go to the SQL blobs table, once by content address
        (what a rebuild restores and an expired hot copy is read back from).

        The blob's text is the stored JSON already (no parse and re-encode of a big value).
        An output this writer committed before is not read or sent again; one whose hot
        copy expired was committed before it could expire (its TTL is far longer than a
        checkpoint takes), so it is left alone.
        """
        refs = sorted(
            {
                r["output_ref"]
                for r in batch.attempts
                if r["status"] == "completed" and r.get("output_ref")
            }
            - self._stored
        )
        if not refs:
            return
        texts = await self.ctx.store.blobs(refs)
        batch.blobs.update({ref: t for ref, t in zip(refs, texts, strict=True) if t is not None})
