"""A first owner's ``running`` goes with its first fenced write (the first dispatch), not a
round trip of its own; a write that never comes is made by ``flush``."""

from __future__ import annotations

from typing import Any

from planloop.core.models import StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.session.sending import Scheduling
from tests.unit.loop_fixtures import SID, Loop, run, step


class CountingStore:
    """Counts the fenced writes that reach the in-memory store."""

    def __init__(self, loop: Loop) -> None:
        self.writes: list[list[Any]] = []
        inner = loop.store.write

        async def write(sid: str, epoch: int, ops: Any) -> None:
            self.writes.append(list(ops))
            await inner(sid, epoch, ops)

        loop.store.write = write  # type: ignore[method-assign]


def test_running_rides_with_the_first_dispatch() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b")]))
    counted = CountingStore(loop)
    loop.io.defer_session("status", "running", "started_at", 12.5)
    scheduling = Scheduling(loop.io, loop.queue, on_failure=_never)
    run(scheduling.dispatch_ready())
    assert len(counted.writes) == 1  # one fenced write: the session fields and the steps
    assert counted.writes[0][0][1] == loop.store.keys.session(SID)
    assert loop.session_hash()["started_at"] == "12.5"
    assert loop.step_hash("a")["status"] == StepStatus.RUNNING.value
    run(loop.io.flush())
    assert len(counted.writes) == 1  # nothing left to write


def test_flush_writes_what_no_dispatch_carried() -> None:
    loop = Loop(Plan(steps=[step("a")]), a=StepStatus.COMPLETED)
    counted = CountingStore(loop)
    loop.io.defer_session("status", "running")
    run(loop.io.flush())
    assert len(counted.writes) == 1
    assert loop.session_hash()["status"] == "running"


async def _never(step_id: str) -> None:
    raise AssertionError(f"no failure expected ({step_id})")
