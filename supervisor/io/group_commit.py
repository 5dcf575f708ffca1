"""One SQL writer for every session a supervisor holds: claims and checkpoints in groups.

A supervisor holding a thousand sessions cannot give each its own transaction: SQLite has one
writer and commits one fsync at a time, and every transaction costs the process the same
Python work however little it carries. So the sessions hand their writes to the process's
:class:`CheckpointWriter` (and :class:`ClaimBatcher`), which commit whatever every session
queued since the last commit in ONE transaction, and acknowledge the events of all of them
in one Redis pipeline. Fencing stays per session: the record bumps each session's row
``WHERE epoch = :epoch`` and skips the rows of one fenced out (``SqlRecord.checkpoint_many``).

Group commit: the writer waits until no session has submitted anything for
``checkpoint_linger_s``, or until ``MAX_LINGER_S`` has passed (a flush skips the wait), so a
burst of outcomes and dispatches becomes one commit after the burst; under sustained load the
commits are large and few. Events are acknowledged only after the batch that applied them is
committed, so a crash before the commit leaves them pending for the next owner. A round
the store refuses (disk full, locked) is held and tried again, never failed
(supervisor/io/held_writes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError, SessionError
from planloop.core.record import Checkpoint, Claim
from planloop.core.record.faults import is_store_fault
from planloop.supervisor.io.commit_rounds import take_round
from planloop.supervisor.io.held_writes import StoreOutage, pass_on

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_LINGER_S = 0.25  # no change waits longer than this for its commit (and its ack)

SqlRunner = Callable[[Callable[[], T]], Awaitable[T]]
Defer = Callable[[], Awaitable[None]]


async def _now() -> None:
    """No deferral: the writers' default."""


class GroupRecord(Protocol):
    """The part of :class:`core.record.SqlRecord` the writers use."""

    def claim_many(self, claims: Sequence[Claim]) -> list[SessionError | None]: ...

    def checkpoint(self, sid: str, epoch: int, batch: Checkpoint) -> None: ...

    def checkpoint_many(self, batches: Sequence[tuple[str, int, Checkpoint]]) -> set[str]: ...

    def outputs(self, sid: str, refs: Sequence[str]) -> dict[str, str]: ...


class GroupStore(Protocol):
    """The part of :class:`supervisor.io.redis_store.SessionStore` the writer uses."""

    async def blobs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[str | None]: ...

    async def ack_many(self, acks: Sequence[tuple[str, Sequence[str]]]) -> None: ...

    async def trim_events(self, sid: str, keep: int) -> int: ...


def merge(into: Checkpoint, batch: Checkpoint) -> None:
    """Append ``batch`` to ``into`` (later values win for the same rows)."""
    into.session.update(batch.session)
    into.attempts += batch.attempts
    into.events += batch.events
    into.plan_versions += batch.plan_versions
    into.decisions += batch.decisions
    into.llm_calls += batch.llm_calls
    into.blobs.update(batch.blobs)


@dataclass
class Pending:
    """What one session queued since its last commit, and who waits for it."""

    sid: str
    epoch: int
    batch: Checkpoint = field(default_factory=Checkpoint)
    acks: list[str] = field(default_factory=list)
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    error: BaseException | None = None
    held: bool = False  # the store refused it: queued again, its waiters not told yet
    since: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    urgent: bool = False  # a flush waits for it: it goes in the next round, before the others


class ClaimBatcher:
    """Claims of sessions being taken, committed together: a claim waits for the one
    transaction in progress at most, never for a queue of them. (Never deferred for the
    sessions starting: a takeover awaits its claim while it starts.)"""

    def __init__(self, record: GroupRecord, sql: SqlRunner[Any], retry_s: float = 1.0) -> None:
        self.record = record
        self.sql = sql
        self.outage = StoreOutage("claims", retry_s)
        self._queue: list[tuple[Claim, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def claim(self, claim: Claim) -> None:
        """Record the claim; raises what refused it (SessionEndedError, FencedOutError)."""
        done = asyncio.get_running_loop().create_future()
        self._queue.append((claim, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="sql-claims")
        await done

    async def _run(self) -> None:
        while self._queue:
            taken, self._queue = self._queue, []
            claims = [c for c, _ in taken]
            try:
                results: list[BaseException | None] = list(
                    await self.sql(lambda: self.record.claim_many(claims))  # noqa: B023
                )
                self.outage.wrote()
            except Exception as exc:  # one bad claim must not fail the others: one by one
                if is_store_fault(exc):  # the same claims again once the store recovers
                    self.outage.refused(exc, len(claims))
                    self._queue = taken + self._queue
                    await self.outage.pause()
                    continue
                results = [await self._alone(c) for c in claims]
            for (_, done), error in zip(taken, results, strict=True):
                if done.done():
                    continue  # its session loop was cancelled meanwhile
                if error is None:
                    done.set_result(None)
                else:
                    done.set_exception(error)

    async def _alone(self, claim: Claim) -> BaseException | None:
        try:
            results: list[SessionError | None] = await self.sql(
                lambda: self.record.claim_many([claim])
            )
            return results[0]
        except Exception as exc:
            return exc


class CheckpointWriter:
    """The process's checkpoint writer: every session's batches, one commit per round.

    A round also waits for ``defer`` until a flush hurries it: while a burst of sessions
    starts, the commit (Python work in the SQL thread, under the event loop's GIL) comes
    after their first dispatches (supervisor/process/admission.py)."""

    def __init__(
        self,
        settings: Settings,
        record: GroupRecord,
        store: GroupStore,
        sql: SqlRunner[Any],
        defer: Defer = _now,
    ) -> None:
        self.settings = settings
        self.record = record
        self.store = store
        self.sql = sql
        self.defer = defer
        self._pending: dict[tuple[str, int], Pending] = {}
        self._wake = asyncio.Event()
        self._hurried = asyncio.Event()  # set while a batch not taken yet is urgent
        self._submitted = 0
        self._acked_since_trim: dict[str, int] = {}
        self._errors: dict[tuple[str, int], BaseException | None] = {}  # open sessions
        self._stored: dict[tuple[str, int], set[str]] = {}  # output digests committed, per session
        self._task: asyncio.Task[None] | None = None
        self.outage = StoreOutage("checkpoints", settings.store_retry_interval_s)

    def submit(self, sid: str, epoch: int, batch: Checkpoint, acks: list[str]) -> Pending:
        """Queue a session's ``batch``; its ``acks`` are acknowledged once it is committed.
        Returns the pending round it joined."""
        pending = self._pending.get((sid, epoch))
        if pending is None:
            pending = self._pending[(sid, epoch)] = Pending(sid, epoch)
        merge(pending.batch, batch)
        pending.acks += acks
        self._submitted += 1
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="checkpoints")
        return pending

    def open(self, sid: str, epoch: int) -> None:
        """A session loop starts writing at ``epoch``: its failures are kept for it."""
        self._errors[(sid, epoch)] = None

    def error_of(self, sid: str, epoch: int) -> BaseException | None:
        """The first failure of a round the session joined (a fenced-out epoch, say)."""
        return self._errors.get((sid, epoch))

    def close_session(self, sid: str, epoch: int) -> None:
        """Forget what a stopped session queued and was not taken yet (never acknowledged:
        the next owner applies those events again)."""
        self._errors.pop((sid, epoch), None)
        self._stored.pop((sid, epoch), None)
        self._acked_since_trim.pop(sid, None)
        pending = self._pending.pop((sid, epoch), None)
        if pending is not None and not pending.done.done():
            pending.done.cancel()

    async def wait(self, pending: Pending, *, hurry: bool = True) -> None:
        """Wait for ``pending`` to be committed, without lingering meanwhile (or, without
        ``hurry``, in the round it joined, as late as the linger makes it)."""
        if not hurry:
            await asyncio.shield(pending.done)
            return
        if self._pending.get((pending.sid, pending.epoch)) is pending:  # not taken yet
            pending.urgent = True
            self._hurried.set()
        await asyncio.shield(pending.done)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await self._linger()
            self._wake.clear()
            self._hurried.clear()  # the urgent batches are taken now (commit_rounds.py)
            now = asyncio.get_running_loop().time()
            taken, self._pending = take_round(self._pending, now, MAX_LINGER_S)
            if self._pending:  # the rest go in the next round
                self._wake.set()
            try:
                await self._commit(taken)
            except Exception as exc:  # kept for each loop to raise; nothing is acknowledged
                log.exception("checkpoint of %d session(s) failed", len(taken))
                for pending in taken:
                    if not pending.held:  # a held round is tried again, not failed
                        pending.error = pending.error or exc
            finally:
                self._hold([p for p in taken if p.held])
                for pending in taken:
                    if pending.held:
                        continue
                    key = (pending.sid, pending.epoch)
                    if pending.error is not None and self._errors.get(key, 0) is None:
                        self._errors[key] = pending.error
                    if not pending.done.done():
                        pending.done.set_result(None)
            if self.outage.ongoing:
                await self.outage.pause()

    async def _linger(self) -> None:
        """Wait for a quiet spell of ``checkpoint_linger_s``, at most ``MAX_LINGER_S``."""
        await self._deferred()
        quiet = self.settings.checkpoint_linger_s
        if quiet <= 0:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + MAX_LINGER_S
        while not self._hurried.is_set():
            left = give_up - loop.time()
            if left <= 0:
                return
            seen = self._submitted
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurried.wait(), min(quiet, left))
            if self._submitted == seen:
                return

    async def _deferred(self) -> None:
        """Wait for ``defer``, unless (or until) a flush hurries the round."""
        if self._hurried.is_set():
            return
        deferring = asyncio.ensure_future(self.defer())
        hurried = asyncio.ensure_future(self._hurried.wait())
        try:
            await asyncio.wait({deferring, hurried}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            deferring.cancel()
            hurried.cancel()

    async def _commit(self, taken: list[Pending]) -> None:
        """One transaction for every session's batch, then one pipeline of acks."""
        for pending in taken:
            pending.held = False
        await self._fill_outputs(taken)
        batches = [(p.sid, p.epoch, p.batch) for p in taken if p.batch]
        if batches:
            try:
                fenced = await self.sql(lambda: self.record.checkpoint_many(batches))
                self.outage.wrote()
            except Exception as exc:  # find the one that fails: the others are written
                if not is_store_fault(exc):
                    fenced = await self._one_by_one(taken)
                else:  # the store refuses everyone's: the whole round is held
                    self.outage.refused(exc, len(batches))
                    fenced = set()
                    for pending in taken:
                        pending.held = True
            for pending in taken:
                if pending.sid in fenced:
                    pending.error = pending.error or FencedOutError(pending.sid, pending.epoch)
                elif not pending.held and pending.batch.blobs and self._is_open(pending):
                    stored = self._stored.setdefault((pending.sid, pending.epoch), set())
                    stored.update(pending.batch.blobs)
        committed = [p for p in taken if p.error is None and not p.held and p.acks]
        await self.store.ack_many([(p.sid, p.acks) for p in committed])
        for pending in committed:
            await self._maybe_trim(pending.sid, len(pending.acks))

    async def _one_by_one(self, taken: list[Pending]) -> set[str]:
        fenced: set[str] = set()
        for pending in taken:
            if not pending.batch:
                continue
            batch = pending.batch
            try:
                await self.sql(lambda: self.record.checkpoint(pending.sid, pending.epoch, batch))  # noqa: B023
            except FencedOutError:
                fenced.add(pending.sid)
            except Exception as exc:
                if is_store_fault(exc):
                    self.outage.refused(exc, 1)
                    pending.held = True
                    continue
                log.exception("session=%s checkpoint failed", pending.sid)
                pending.error = exc
        return fenced

    def _is_open(self, pending: Pending) -> bool:
        return (pending.sid, pending.epoch) in self._errors

    def _hold(self, held: list[Pending]) -> None:
        """Queue the rounds the store refused again, each ahead of what its session queued
        since (later values win); their waiters are told once the combined round commits.
        A session stopped meanwhile is dropped (its events, never acknowledged, go to the
        next owner)."""
        for old in held:
            key = (old.sid, old.epoch)
            newer = self._pending.get(key)
            if key not in self._errors:
                old.done.cancel()
            elif newer is None:
                self._pending[key] = old
            else:
                combined = Checkpoint()
                merge(combined, old.batch)
                merge(combined, newer.batch)
                newer.batch, newer.acks = combined, old.acks + newer.acks
                newer.urgent = newer.urgent or old.urgent
                newer.done.add_done_callback(functools.partial(pass_on, old.done))
        if held:
            self._wake.set()

    async def _maybe_trim(self, sid: str, acked: int) -> None:
        keep = self.settings.stream_keep
        count = self._acked_since_trim.get(sid, 0) + acked
        if count < max(1, keep // 10):
            self._acked_since_trim[sid] = count
            return
        self._acked_since_trim.pop(sid, None)
        await self.store.trim_events(sid, keep)

    async def _fill_outputs(self, taken: list[Pending]) -> None:
        """Completed attempts' outputs go to the SQL blobs table, once by content address
        (what a rebuild restores and an expired hot copy is read back from).

        The blob's text is the stored JSON already (no parse and re-encode of a big value).
        An output a session's rounds committed before is not read or sent again; one whose
        hot copy expired was committed before it could expire (its TTL is far longer than a
        checkpoint takes), so it is left alone. One MGET for every session of the round.
        """
        wanted: list[tuple[Pending, str]] = []
        for pending in taken:
            stored = self._stored.get((pending.sid, pending.epoch), set())
            refs = {
                r["output_ref"]
                for r in pending.batch.attempts
                if r["status"] == "completed" and r.get("output_ref")
            }
            wanted += [(pending, ref) for ref in sorted(refs - stored)]
        if not wanted:
            return
        texts = await self.store.blobs([ref for _, ref in wanted])
        for (pending, ref), text in zip(wanted, texts, strict=True):
            if text is not None:
                pending.batch.blobs[ref] = text
