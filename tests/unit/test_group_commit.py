"""The checkpoint writer's group commit: one transaction for many sessions, a quiet spell
waited for but never for ever, and fencing kept per session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError, SessionError
from planloop.core.record import Checkpoint, Claim
from planloop.supervisor.io.group_commit import MAX_LINGER_S, CheckpointWriter, ClaimBatcher

T = TypeVar("T")
GENEROUS_S = 20.0  # only a writer that ignores flush() or MAX_LINGER_S takes this long


@dataclass
class _Record:
    commits: list[list[tuple[str, int, Checkpoint]]] = field(default_factory=list)
    epochs: dict[str, int] = field(default_factory=dict)  # the record's epoch per session
    claims: list[list[str]] = field(default_factory=list)

    def checkpoint_many(self, batches: Sequence[tuple[str, int, Checkpoint]]) -> set[str]:
        fenced = {sid for sid, epoch, _ in batches if self.epochs.get(sid, epoch) != epoch}
        self.commits.append([b for b in batches if b[0] not in fenced])
        return fenced

    def checkpoint(self, sid: str, epoch: int, batch: Checkpoint) -> None:
        if self.checkpoint_many([(sid, epoch, batch)]):
            raise FencedOutError(sid, epoch)

    def claim_many(self, claims: Sequence[Claim]) -> list[SessionError | None]:
        self.claims.append([c.sid for c in claims])
        return [
            FencedOutError(c.sid, c.epoch) if self.epochs.get(c.sid, 0) >= c.epoch else None
            for c in claims
        ]

    def outputs(self, sid: str, refs: Sequence[str]) -> dict[str, str]:
        return {}


@dataclass
class _Store:
    acked: list[tuple[str, list[str]]] = field(default_factory=list)
    rounds: int = 0

    async def ack_many(self, acks: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.rounds += 1
        self.acked += [(sid, list(ids)) for sid, ids in acks]

    async def blobs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[Any]:
        return [None for _ in refs]

    async def trim_events(self, sid: str, keep: int) -> int:
        return 0


async def _sql(func: Callable[[], T]) -> T:
    return func()


def _writer(linger_s: float, record: _Record | None = None) -> tuple[CheckpointWriter, _Store]:
    store = _Store()
    writer = CheckpointWriter(
        Settings(checkpoint_linger_s=linger_s), record or _Record(), store, _sql
    )
    return writer, store


def _batch(i: int) -> Checkpoint:
    return Checkpoint(session={"n": i})


def test_flush_does_not_wait_for_the_quiet_spell() -> None:
    async def scenario() -> tuple[_Record, _Store]:
        record = _Record()
        writer, store = _writer(3600, record)
        writer.open("S1", 1)
        writer.submit("S1", 1, _batch(1), ["1-0"])
        last = writer.submit("S1", 1, _batch(2), ["2-0"])
        await asyncio.wait_for(writer.wait(last), GENEROUS_S)
        await writer.close()
        return record, store

    record, store = asyncio.run(scenario())
    assert [[b.session for _, _, b in c] for c in record.commits] == [[{"n": 2}]], "one commit"
    assert store.acked == [("S1", ["1-0", "2-0"])]


@pytest.mark.parametrize("hurry", [False, True])
def test_many_sessions_share_one_commit_and_one_ack_round_trip(hurry: bool) -> None:
    """Lingering, or every one of them flushed at once (a thousand sessions ending)."""

    async def scenario() -> tuple[_Record, _Store]:
        record = _Record()
        writer, store = _writer(3600, record)
        rounds = [writer.submit(f"S{i}", 1, _batch(i), [f"{i}-0"]) for i in range(50)]
        waits = (writer.wait(r, hurry=hurry) for r in rounds)
        await asyncio.wait_for(asyncio.gather(*waits), GENEROUS_S)
        await writer.close()
        return record, store

    record, store = asyncio.run(scenario())
    assert len(record.commits) == 1
    assert len(record.commits[0]) == 50
    assert store.rounds == 1
    assert len(store.acked) == 50


def test_a_flush_commits_what_it_waits_for_before_the_lingering_batches() -> None:
    """A waiter pays for a small transaction: the batches nobody waits for follow in the
    next round, unless they waited the longest linger already (they join)."""

    async def scenario() -> tuple[int, list[list[str]]]:
        record = _Record()
        writer, _ = _writer(3600, record)
        lazy = writer.submit("LAZY", 1, _batch(1), ["1-0"])
        old = writer.submit("OLD", 1, _batch(2), ["2-0"])
        old.since -= MAX_LINGER_S  # as if it had waited that long
        await asyncio.wait_for(writer.wait(writer.submit("END", 1, _batch(3), [])), GENEROUS_S)
        flushed = len(record.commits)
        await asyncio.wait_for(writer.wait(lazy, hurry=False), GENEROUS_S)
        await writer.close()
        return flushed, [[sid for sid, _, _ in c] for c in record.commits]

    flushed, commits = asyncio.run(scenario())
    assert flushed == 1
    assert commits == [["OLD", "END"], ["LAZY"]]


def test_a_fenced_session_fails_alone_and_its_events_stay_pending() -> None:
    async def scenario() -> tuple[CheckpointWriter, _Store]:
        record = _Record(epochs={"OLD": 7})
        writer, store = _writer(0, record)
        writer.open("OLD", 3)
        writer.open("NEW", 1)
        writer.submit("OLD", 3, _batch(1), ["1-0"])
        last = writer.submit("NEW", 1, _batch(2), ["2-0"])
        await asyncio.wait_for(writer.wait(last), GENEROUS_S)
        await writer.close()
        return writer, store

    writer, store = asyncio.run(scenario())
    assert isinstance(writer.error_of("OLD", 3), FencedOutError)
    assert writer.error_of("NEW", 1) is None
    assert store.acked == [("NEW", ["2-0"])], "a fenced session's events are not acknowledged"


def test_a_steady_stream_of_changes_is_still_committed() -> None:
    async def scenario() -> tuple[_Record, _Store]:
        record = _Record()
        writer, store = _writer(3600, record)  # never quiet for that long
        deadline = asyncio.get_running_loop().time() + GENEROUS_S
        i = 0
        while not record.commits and asyncio.get_running_loop().time() < deadline:
            i += 1
            writer.submit("S1", 1, _batch(i), [f"{i}-0"])
            await asyncio.sleep(0.005)
        await writer.close()
        return record, store

    record, store = asyncio.run(scenario())
    assert record.commits, "the writer waited for a quiet spell that never came"
    assert store.acked[0][1][0] == "1-0"


def test_claims_made_together_are_one_transaction_and_refusals_stay_per_session() -> None:
    async def scenario() -> tuple[_Record, list[BaseException | None]]:
        record = _Record(epochs={"TAKEN": 5})
        batcher = ClaimBatcher(record, _sql)
        claims = [Claim(sid, 1, "me", {}) for sid in ("A", "TAKEN", "B")]
        results = await asyncio.gather(*(batcher.claim(c) for c in claims), return_exceptions=True)
        return record, list(results)

    record, results = asyncio.run(scenario())
    assert record.claims == [["A", "TAKEN", "B"]]
    assert results[0] is None
    assert results[2] is None
    assert isinstance(results[1], FencedOutError)


@pytest.mark.parametrize("linger_s", [0.0, 3600.0])
def test_a_dropped_session_is_not_written(linger_s: float) -> None:
    async def scenario() -> _Record:
        record = _Record()
        writer, _ = _writer(linger_s, record)
        writer.open("GONE", 1)
        writer.submit("GONE", 1, _batch(1), ["1-0"])
        writer.close_session("GONE", 1)
        last = writer.submit("KEPT", 1, _batch(2), ["2-0"])
        await asyncio.wait_for(writer.wait(last), GENEROUS_S)
        await writer.close()
        return record

    record = asyncio.run(scenario())
    assert [sid for commit in record.commits for sid, _, _ in commit] == ["KEPT"]


def test_a_round_nobody_hurries_waits_for_the_defer_and_a_flush_does_not() -> None:
    """While sessions start (admission's defer), a lingering round waits; a round someone
    waits for with a flush is committed at once."""

    async def scenario() -> tuple[int, int, int]:
        record, quiet = _Record(), asyncio.Event()

        async def defer() -> None:
            await quiet.wait()

        writer = CheckpointWriter(Settings(checkpoint_linger_s=0.0), record, _Store(), _sql, defer)
        lazy = writer.submit("S1", 1, _batch(1), ["1-0"])
        for _ in range(5):
            await asyncio.sleep(0)
        deferred = len(record.commits)
        await asyncio.wait_for(writer.wait(writer.submit("S2", 1, _batch(2), [])), GENEROUS_S)
        flushed = len(record.commits)
        for _ in range(5):
            await asyncio.sleep(0)
        still_deferred = len(record.commits)
        quiet.set()
        await asyncio.wait_for(writer.wait(lazy, hurry=False), GENEROUS_S)
        await writer.close()
        assert [[sid for sid, _, _ in c] for c in record.commits] == [["S2"], ["S1"]]
        return deferred, flushed, still_deferred

    deferred, flushed, still_deferred = asyncio.run(scenario())
    assert deferred == 0, "the round waited for the sessions starting"
    assert flushed == 1, "the flush committed its batch, without waiting"
    assert still_deferred == 1, "the batch nobody waits for still waits for the starts"
