"""Admission: sessions start first come, first served within their slots, and older sessions
wait for the starts (never longer than their bound). Order only, no wall-clock thresholds."""

from __future__ import annotations

import asyncio

import pytest

from planloop.supervisor.process.admission import BURST_MIN, Admission


def test_starts_take_their_slots_in_arrival_order() -> None:
    async def scenario() -> list[str]:
        admission = Admission(slots=2)
        order: list[str] = []
        release = asyncio.Event()

        async def start(name: str) -> None:
            async with admission.start():
                order.append(name)
                await release.wait()

        tasks = [asyncio.create_task(start(n)) for n in "abcde"]
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["a", "b"]  # two slots: the others queue
        assert admission.starting == 5
        release.set()
        await asyncio.gather(*tasks)
        assert admission.starting == 0
        return order

    assert asyncio.run(scenario()) == ["a", "b", "c", "d", "e"]


def test_older_sessions_wait_until_a_burst_of_starts_is_done() -> None:
    async def scenario() -> list[str]:
        admission = Admission(slots=1, max_defer_s=3600)
        order: list[str] = []
        go = asyncio.Event()

        async def new(name: str) -> None:
            async with admission.start():
                await go.wait()
                order.append(name)

        async def old() -> None:
            await admission.defer()
            assert admission.starting < BURST_MIN  # what is left of the burst is a few
            order.append("old bookkeeping")

        names = [f"new {i}" for i in range(BURST_MIN)]
        starts = [asyncio.create_task(new(n)) for n in names]
        await asyncio.sleep(0)
        waiting = asyncio.create_task(old())
        for _ in range(3):
            await asyncio.sleep(0)
        assert order == []  # the old session waits while a burst of sessions starts
        go.set()
        await asyncio.gather(*starts, waiting)
        return order

    order = asyncio.run(scenario())
    assert order[0] == "new 0"
    assert sorted(order) == sorted([*(f"new {i}" for i in range(BURST_MIN)), "old bookkeeping"])


@pytest.mark.parametrize("batch", [False, True])
def test_a_few_sessions_starting_do_not_hold_older_ones(batch: bool) -> None:
    """One session submitted as another ends, or a small batch begun together: the running
    sessions' turns and ends go on (a burst on the inbox still holds them, below)."""

    async def scenario() -> list[str]:
        admission = Admission(slots=1, max_defer_s=3600)
        order: list[str] = []
        go = asyncio.Event()

        async def new() -> None:
            if batch:
                with admission.starting_batch():
                    await go.wait()
            else:
                async with admission.start():
                    await go.wait()
            order.append("new")

        starts = [asyncio.create_task(new()) for _ in range(BURST_MIN - 1)]
        await asyncio.sleep(0)
        await admission.defer()
        order.append("old bookkeeping")
        assert admission.starting == BURST_MIN - 1
        go.set()
        await asyncio.gather(*starts)
        return order

    assert asyncio.run(scenario())[0] == "old bookkeeping"


def test_an_older_session_waits_no_longer_than_its_bound() -> None:
    async def scenario() -> None:
        admission = Admission(slots=1, max_defer_s=0.0)
        stuck = asyncio.Event()

        async def never_done() -> None:
            async with admission.start():
                await stuck.wait()

        task = asyncio.create_task(never_done())
        await asyncio.sleep(0)
        await admission.defer()  # returns although a start is still in progress
        assert admission.starting == 1
        stuck.set()
        await task

    asyncio.run(scenario())


def test_nothing_starting_costs_an_older_session_nothing() -> None:
    async def scenario() -> None:
        admission = Admission()
        await admission.defer()
        assert admission.starting == 0

    asyncio.run(scenario())


def test_a_start_that_fails_frees_its_slot() -> None:
    async def scenario() -> None:
        admission = Admission(slots=1)
        with pytest.raises(RuntimeError):
            async with admission.start():
                raise RuntimeError("load failed")
        assert admission.starting == 0
        async with admission.start():  # the slot is free again
            assert admission.starting == 1

    asyncio.run(scenario())


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Admission(slots=0)


def test_an_inbox_backlog_is_a_burst_until_a_read_finds_less() -> None:
    """Reads of fewer than BURST_MIN sessions keep up; a backlog opens a burst (older loops
    defer for all of it, not batch by batch) and the first read below it closes it."""

    async def scenario() -> None:
        admission = Admission(max_defer_s=3600)
        admission.intake(BURST_MIN - 1, now=0.0)
        assert not admission.in_burst
        assert admission.starting == 0
        admission.intake(BURST_MIN, now=1.0)
        assert admission.in_burst
        assert admission.starting == 1
        admission.intake(200, now=2.0)
        assert admission.starting == 1, "a burst counts once however many reads it lasts"
        older = asyncio.create_task(admission.defer())
        await asyncio.sleep(0)
        assert not older.done(), "older loops wait while the burst lasts"
        admission.intake(0, now=3.0)
        assert not admission.in_burst
        assert admission.starting == 0
        await asyncio.wait_for(older, 5)

    asyncio.run(scenario())


def test_a_burst_ends_after_its_bound_so_older_loops_get_a_turn() -> None:
    async def scenario() -> None:
        admission = Admission(max_defer_s=2.0)
        admission.intake(500, now=10.0)
        admission.intake(500, now=11.9)
        assert admission.in_burst
        admission.intake(500, now=12.0)  # two seconds of backlog: the others' turn
        assert not admission.in_burst
        assert admission.starting == 0
        admission.intake(500, now=12.1)  # the next read opens the next burst
        assert admission.in_burst

    asyncio.run(scenario())


def test_a_burst_and_a_batch_start_overlap_without_losing_count() -> None:
    async def scenario() -> None:
        admission = Admission()
        admission.intake(BURST_MIN, now=0.0)
        with admission.starting_batch():
            assert admission.starting == 2
            admission.intake(0, now=0.1)
            assert admission.starting == 1
        assert admission.starting == 0
        await admission.defer()  # quiet again: returns at once

    asyncio.run(scenario())
