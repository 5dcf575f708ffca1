"""The supervisor's SQL writes the store refuses (disk full): held and written once it
recovers, in order, with no error raised to the session and no event acknowledged early."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.exc import IntegrityError, OperationalError

from planloop.config.settings import Settings
from planloop.core.errors import SessionError
from planloop.core.record import Checkpoint, Claim
from planloop.core.record.faults import is_store_fault, store_cause
from planloop.supervisor.io.group_commit import CheckpointWriter, ClaimBatcher
from planloop.supervisor.session.decisions import commit_decisions
from planloop.supervisor.session.state import SessionState

T = TypeVar("T")
GENEROUS_S = 20.0

DISK_FULL = OperationalError("INSERT ...", {}, sqlite3.OperationalError("database or disk is full"))


@dataclass
class _FullDisk:
    """A record whose disk is full for its first ``refusals`` writes."""

    refusals: int
    commits: list[list[tuple[str, int, Checkpoint]]] = field(default_factory=list)
    claims: list[list[str]] = field(default_factory=list)
    tries: int = 0

    def _write(self) -> None:
        self.tries += 1
        if self.tries <= self.refusals:
            raise DISK_FULL

    def checkpoint_many(self, batches: Sequence[tuple[str, int, Checkpoint]]) -> set[str]:
        self._write()
        self.commits.append(list(batches))
        return set()

    def checkpoint(self, sid: str, epoch: int, batch: Checkpoint) -> None:
        self.checkpoint_many([(sid, epoch, batch)])

    def claim_many(self, claims: Sequence[Claim]) -> list[SessionError | None]:
        self._write()
        self.claims.append([c.sid for c in claims])
        return [None for _ in claims]

    def outputs(self, sid: str, refs: Sequence[str]) -> dict[str, str]:
        return {}


@dataclass
class _Store:
    acked: list[tuple[str, list[str]]] = field(default_factory=list)

    async def ack_many(self, acks: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.acked += [(sid, list(ids)) for sid, ids in acks]

    async def blobs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[Any]:
        return [None for _ in refs]

    async def trim_events(self, sid: str, keep: int) -> int:
        return 0


async def _sql(func: Callable[[], T]) -> T:
    return func()


def _writer(record: _FullDisk) -> tuple[CheckpointWriter, _Store]:
    store = _Store()
    settings = Settings(checkpoint_linger_s=0.0, store_retry_interval_s=0.01)
    return CheckpointWriter(settings, record, store, _sql), store


def _attempt(step: str, n: int, status: str) -> dict[str, Any]:
    return {"step_id": step, "attempt": n, "status": status}


def test_a_refused_round_is_held_then_written_ahead_of_what_came_after() -> None:
    async def scenario() -> tuple[_FullDisk, _Store, CheckpointWriter, bool]:
        record = _FullDisk(refusals=3)
        writer, store = _writer(record)
        writer.open("S", 1)
        first = Checkpoint(session={"n": 1}, attempts=[_attempt("w1", 1, "interrupted")])
        held = writer.submit("S", 1, first, ["1-0"])
        while record.tries < 1:  # the first round is refused
            await asyncio.sleep(0.001)
        told_early = held.done.done()
        second = Checkpoint(session={"n": 2}, attempts=[_attempt("w1", 2, "completed")])
        last = writer.submit("S", 1, second, ["2-0"])
        await asyncio.wait_for(asyncio.gather(writer.wait(held), writer.wait(last)), GENEROUS_S)
        await writer.close()
        return record, store, writer, told_early

    record, store, writer, told_early = asyncio.run(scenario())
    assert not told_early, "a refused round was reported done before it was written"
    assert writer.error_of("S", 1) is None, "a full disk is no error of the session's"
    rows = [(sid, b) for commit in record.commits for sid, _, b in commit]
    assert len(rows) == 1  # written once, the two rounds together
    batch = rows[0][1]
    assert batch.session == {"n": 2}  # the newer value wins
    assert [(a["step_id"], a["attempt"]) for a in batch.attempts] == [("w1", 1), ("w1", 2)]
    assert store.acked == [("S", ["1-0", "2-0"])], "events acknowledged only once written"
    assert not writer.outage.ongoing


def test_a_refused_round_of_a_session_that_stopped_is_dropped() -> None:
    async def scenario() -> _FullDisk:
        record = _FullDisk(refusals=2)
        writer, _ = _writer(record)
        writer.open("GONE", 1)
        writer.submit("GONE", 1, Checkpoint(session={"n": 1}), ["1-0"])
        while record.tries < 1:
            await asyncio.sleep(0.001)
        writer.close_session("GONE", 1)  # its next owner applies the events again
        writer.open("KEPT", 1)
        kept = writer.submit("KEPT", 1, Checkpoint(session={"n": 2}), ["2-0"])
        await asyncio.wait_for(writer.wait(kept), GENEROUS_S)
        await writer.close()
        return record

    record = asyncio.run(scenario())
    assert [sid for commit in record.commits for sid, _, _ in commit] == ["KEPT"]


def test_claims_the_store_refuses_are_made_once_it_recovers() -> None:
    async def scenario() -> tuple[_FullDisk, list[BaseException | None]]:
        record = _FullDisk(refusals=4)
        batcher = ClaimBatcher(record, _sql, retry_s=0.01)
        claims = [Claim(sid, 1, "me", {}) for sid in ("A", "B")]
        results = await asyncio.wait_for(
            asyncio.gather(*(batcher.claim(c) for c in claims), return_exceptions=True),
            GENEROUS_S,
        )
        return record, list(results)

    record, results = asyncio.run(scenario())
    assert results == [None, None]
    assert record.claims == [["A", "B"]]
    assert record.tries == 5


def test_store_faults_are_refusals_to_wait_out_and_other_errors_are_not() -> None:
    assert is_store_fault(DISK_FULL)
    assert store_cause(DISK_FULL) == "database or disk is full"
    assert not is_store_fault(IntegrityError("INSERT ...", {}, sqlite3.IntegrityError("dup")))
    assert not is_store_fault(ValueError("a bug"))


def test_decisions_the_store_refuses_join_the_checkpoint_ahead_of_later_ones() -> None:
    @dataclass
    class _Ctx:
        record: _FullDisk

        async def sql(self, func: Callable[[], T]) -> T:
            return func()

    state = SessionState("S", 1)
    state.batch.decisions.append({"action": "continue", "n": 1})
    ctx = _Ctx(_FullDisk(refusals=1))
    asyncio.run(commit_decisions(ctx, state))  # type: ignore[arg-type]
    state.batch.decisions.append({"action": "abort", "n": 2})
    assert [d["n"] for d in state.batch.decisions] == [1, 2]  # kept, in order, for the writer
    asyncio.run(commit_decisions(ctx, state))  # type: ignore[arg-type]
    written = [d["n"] for commit in ctx.record.commits for _, _, b in commit for d in b.decisions]
    assert written == [1, 2]
    assert state.batch.decisions == []
