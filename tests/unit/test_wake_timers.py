"""The supervisor's one timer heap for parked sessions: order, replacement, cancel, and one
event-loop timer for the whole heap."""

from __future__ import annotations

import asyncio

from planloop.supervisor.io.wake_timers import COMPACT_SLACK, TimerHeap, WakeTimers


def recorder(log: list[str], name: str):  # type: ignore[no-untyped-def]
    return lambda: log.append(name)


def test_due_timers_come_out_earliest_first_and_the_rest_stay() -> None:
    heap, log = TimerHeap(), []
    heap.set("b", 20.0, recorder(log, "b"))
    heap.set("a", 10.0, recorder(log, "a"))
    heap.set("c", 30.0, recorder(log, "c"))
    assert heap.next_due() == 10.0
    for wake in heap.pop_due(25.0):
        wake()
    assert log == ["a", "b"]
    assert len(heap) == 1
    assert heap.next_due() == 30.0
    assert heap.pop_due(29.9) == []


def test_setting_a_key_again_replaces_its_timer() -> None:
    heap, log = TimerHeap(), []
    heap.set("s", 10.0, recorder(log, "first"))
    heap.set("s", 50.0, recorder(log, "second"))
    assert len(heap) == 1
    assert heap.next_due() == 50.0  # the replaced entry is skipped
    assert heap.pop_due(40.0) == []
    for wake in heap.pop_due(50.0):
        wake()
    assert log == ["second"]


def test_a_cancelled_timer_never_fires_and_the_heap_is_empty_after() -> None:
    heap = TimerHeap()
    heap.set("s", 10.0, lambda: None)
    heap.cancel("s")
    heap.cancel("never-set")  # nothing to cancel: no error
    assert heap.next_due() is None
    assert heap.pop_due(100.0) == []
    assert len(heap) == 0


def test_rearming_many_times_keeps_the_heap_near_the_live_timers() -> None:
    """A session re-arms its timer every turn: the heap must not grow with the turns."""
    heap = TimerHeap()
    for turn in range(10_000):
        heap.set(f"s{turn % 10}", float(turn), lambda: None)
    assert len(heap) == 10
    assert len(heap._heap) <= 2 * 10 + COMPACT_SLACK + 1
    assert heap.next_due() == 9_990.0


def test_the_event_loop_holds_one_timer_for_the_whole_heap_and_fires_in_order() -> None:
    async def scenario() -> tuple[list[str], int, int]:
        timers, log = WakeTimers(), []
        loop = asyncio.get_running_loop()
        handles: list[asyncio.TimerHandle] = []
        call_at = loop.call_at

        def counted(when, callback, *args, **kw):  # type: ignore[no-untyped-def]
            handles.append(call_at(when, callback, *args, **kw))
            return handles[-1]

        loop.call_at = counted  # type: ignore[method-assign]
        for i in range(100):
            timers.wake_in(f"s{i}", 0.05 + i * 0.0001, recorder(log, f"s{i}"))
        timers.wake_in("first", 0.01, recorder(log, "first"))
        timers.cancel("s50")
        armed = sum(not h.cancelled() for h in handles)
        done = asyncio.Event()
        timers.wake_in("last", 0.2, done.set)
        await asyncio.wait_for(done.wait(), 5.0)
        timers.close()
        return log, armed, len(timers)

    log, armed, left = asyncio.run(scenario())
    assert armed == 1  # one loop timer (its head), however many sessions wait
    assert log[0] == "first"
    assert log[1:] == [f"s{i}" for i in range(100) if i != 50]
    assert left == 0
