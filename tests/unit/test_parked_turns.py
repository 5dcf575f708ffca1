"""A parked session's turn, over the in-memory store with a stand-in event hub: the loop asks
the hub for no time when nothing is due, and claims a former owner's events only when the
hub's sweep found some (an idle session sends nothing of its own)."""

from __future__ import annotations

import time

from planloop.core.models import Event, EventType, StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.io.store_port import Entry
from planloop.supervisor.session.events import BUSY_WAIT_MS
from planloop.supervisor.session.sending import HELD_BACK_LOOK_S
from planloop.supervisor.session.waiting import POLL_S
from tests.unit.loop_fixtures import SID, Loop, run, step


class Hub:
    """Records what the loop asks for; its sweep's findings are set by the test."""

    def __init__(self) -> None:
        self.asked: list[int | None] = []
        self.found: set[str] = set()

    async def read(self, sid: str, *, count: int, block_ms: int | None) -> list[Entry]:
        self.asked.append(block_ms)
        return []

    def claim_due(self, sid: str) -> bool:
        if sid not in self.found:
            return False
        self.found.discard(sid)
        return True


def parked(plan: Plan, **states: StepStatus) -> tuple[Loop, Hub]:
    loop, hub = Loop(plan, **states), Hub()
    loop.io.events = hub
    return loop, hub


def test_a_session_waiting_for_an_approval_asks_the_hub_for_no_time() -> None:
    loop, hub = parked(Plan(steps=[step("a", requires_approval=True)]))
    assert run(loop.runner.events.wait()) == []  # after its start: a short wait
    assert run(loop.runner.events.wait()) == []  # after a quiet turn: parked
    assert hub.asked == [BUSY_WAIT_MS, None]


def test_steps_held_back_for_a_worker_make_the_session_look_again() -> None:
    loop, hub = parked(Plan(steps=[step("a", requires_approval=True)]))
    loop.runner.scheduling.waiting["a"] = 0.0  # held back: no live worker serves its tool
    run(loop.runner.events.wait())
    assert hub.asked == [int(HELD_BACK_LOOK_S * 1000)]


def test_a_long_step_in_flight_wakes_its_session_for_the_watchdog_not_every_second() -> None:
    loop, hub = parked(Plan(steps=[step("a")]), a=StepStatus.RUNNING)
    loop.state.states["a"].dispatched_at = time.time()
    run(loop.runner.scheduling.watchdog())  # the no-consumer watch looked: the queue is empty
    run(loop.runner.events.wait())  # after its start: a short wait
    run(loop.runner.events.wait())  # after a quiet turn: until the watchdog is due
    settings = loop.settings
    limit_ms = (loop.io.timeout(loop.state.steps["a"]) + settings.watchdog_grace_s) * 1000
    watch_ms = (settings.no_consumer_warning_s + 1.0) * 1000
    asked = hub.asked[-1]
    assert hub.asked[0] == BUSY_WAIT_MS
    assert asked is not None
    assert POLL_S * 1000 < asked <= min(limit_ms, watch_ms)


def test_a_former_owners_events_are_claimed_once_the_sweep_found_them() -> None:
    loop, hub = parked(Plan(steps=[step("a", requires_approval=True)]))
    loop.store.add_event(SID, Event(type=EventType.EXTERNAL_SIGNAL, description="late"))
    run(loop.store.read_events(SID, "former", count=10, block_ms=1))  # it read, then lost us
    run(loop.runner.events.reclaim_idle())
    assert loop.state.batch.events == []  # nothing found yet: nothing sent, nothing claimed
    hub.found.add(SID)
    run(loop.runner.events.reclaim_idle())
    assert [e.description for _, e in loop.state.batch.events] == ["late"]
