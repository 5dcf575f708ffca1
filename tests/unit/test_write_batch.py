"""WriteBatch: the calls of one loop turn go in one round trip, each caller gets its own reply
or error, a failed round trip fails its callers, and a cancelled caller's call is not sent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from planloop.supervisor.io.write_batch import WriteBatch


class Redis:
    """Answers each call with its double; a call "bad" gets an error of its own."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.round_trips: list[list[int | str]] = []
        self.fail = fail

    async def send(self, calls: Sequence[int | str]) -> list[object]:
        self.round_trips.append(list(calls))
        await asyncio.sleep(0)  # the reply comes in a later turn
        if self.fail is not None:
            raise self.fail
        return [ValueError(f"refused {c}") if c == "bad" else c * 2 for c in calls]


def test_calls_of_one_turn_share_one_round_trip() -> None:
    async def scenario() -> tuple[list[object], list[list[int | str]]]:
        redis = Redis()
        batch: WriteBatch[int | str] = WriteBatch(redis.send)
        replies = await asyncio.gather(*(batch.run(n) for n in range(5)))
        return list(replies), redis.round_trips

    replies, round_trips = asyncio.run(scenario())
    assert replies == [0, 2, 4, 6, 8]
    assert round_trips == [[0, 1, 2, 3, 4]]


def test_a_later_turn_makes_a_new_round_trip() -> None:
    async def scenario() -> list[list[int | str]]:
        redis = Redis()
        batch: WriteBatch[int | str] = WriteBatch(redis.send)
        assert await batch.run(1) == 2
        assert await batch.run(2) == 4
        return redis.round_trips

    assert asyncio.run(scenario()) == [[1], [2]]


def test_batches_are_cut_at_their_size() -> None:
    async def scenario() -> list[list[int | str]]:
        redis = Redis()
        batch: WriteBatch[int | str] = WriteBatch(redis.send, max_batch=2)
        await asyncio.gather(*(batch.run(n) for n in range(5)))
        return redis.round_trips

    assert asyncio.run(scenario()) == [[0, 1], [2, 3], [4]]


def test_an_error_reaches_only_its_own_caller() -> None:
    async def scenario() -> list[object]:
        batch: WriteBatch[int | str] = WriteBatch(Redis().send)
        return list(await asyncio.gather(batch.run(1), batch.run("bad"), return_exceptions=True))

    good, bad = asyncio.run(scenario())
    assert good == 2
    assert isinstance(bad, ValueError)
    assert "refused bad" in str(bad)


def test_a_failed_round_trip_fails_every_caller() -> None:
    async def scenario() -> list[object]:
        batch: WriteBatch[int | str] = WriteBatch(Redis(fail=ConnectionError("down")).send)
        return list(await asyncio.gather(batch.run(1), batch.run(2), return_exceptions=True))

    assert [str(r) for r in asyncio.run(scenario())] == ["down", "down"]


def test_a_caller_cancelled_before_the_send_sends_nothing() -> None:
    async def scenario() -> tuple[object, list[list[int | str]]]:
        redis = Redis()
        batch: WriteBatch[int | str] = WriteBatch(redis.send)
        cancelled = asyncio.create_task(batch.run(1))
        kept = asyncio.create_task(batch.run(2))
        await asyncio.sleep(0)  # both queued their call
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return await kept, redis.round_trips

    reply, round_trips = asyncio.run(scenario())
    assert reply == 4
    assert round_trips == [[2]]


def test_a_batch_needs_room_for_a_call() -> None:
    with pytest.raises(ValueError, match="at least one call"):
        WriteBatch(Redis().send, max_batch=0)


def test_a_call_leaves_in_the_loop_turn_after_it_was_made() -> None:
    # Not two turns later (a flush callback, then a task of its own): on a busy loop each
    # turn is a lap of every session's work.
    async def scenario() -> int:
        turns = 0
        sent_at: list[int] = []

        async def count_turns() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        async def send(calls: Sequence[int]) -> list[object]:
            sent_at.append(turns)
            return list(calls)

        ticker = asyncio.ensure_future(count_turns())
        await asyncio.sleep(0)
        batch: WriteBatch[int] = WriteBatch(send)
        asked_at = turns
        await batch.run(1)
        ticker.cancel()
        return sent_at[0] - asked_at

    assert asyncio.run(scenario()) <= 1
