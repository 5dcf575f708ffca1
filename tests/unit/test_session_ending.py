"""Ending a session through its ``Ending`` ports (state, store, queue), without a runner,
Redis or SQL: every step ends, the report is written, the session leaves the active set."""

from __future__ import annotations

import json

from planloop.core.catalogue import SensitiveNames
from planloop.core.models import SessionStatus, StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.session.ending import Ending
from planloop.supervisor.session.finish import finish_session, undoes
from tests.unit.loop_fixtures import SID, Loop, run, step


def ending(loop: Loop) -> tuple[Ending, list[int]]:
    checkpoints: list[int] = []

    async def checkpoint() -> None:
        checkpoints.append(len(loop.state.batch.events))

    return Ending(
        loop.io, loop.changes, loop.queue, SensitiveNames(loop.tools), checkpoint
    ), checkpoints


def test_ending_cancels_what_runs_reports_and_leaves_the_active_set() -> None:
    loop = Loop(
        Plan(steps=[step("a"), step("b", "a"), step("c")]),
        a=StepStatus.COMPLETED,
        c=StepStatus.RUNNING,
    )
    loop.state.states["c"].task_id = "task-c"
    loop.store.hashes[loop.store.keys.step(SID, "c")] = {"status": "running", "attempt": "1"}
    loop.store.sets[loop.store.keys.active] = {SID}
    end, checkpoints = ending(loop)
    run(finish_session(end, SessionStatus.ABORTED, "stop", undo=False))
    states = {i: st.status for i, st in loop.state.states.items()}
    assert states == {
        "a": StepStatus.COMPLETED,
        "b": StepStatus.CANCELLED,
        "c": StepStatus.CANCELLED,
    }
    assert loop.queue.revoked == ["task-c"]
    assert loop.step_hash("c")["status"] == "cancelled"
    session = loop.session_hash()
    assert (session["status"], session["error"]) == ("aborted", "stop")
    report = json.loads(session["report"])
    assert report["status"] == "aborted"
    assert {s["id"] for s in report["steps"]} == {"a", "b", "c"}
    assert SID not in loop.store.sets[loop.store.keys.active]
    assert checkpoints  # the record is written before Redis says ended
    assert loop.state.batch.session["status"] == "aborted"
    assert [kind for _, kind, _ in loop.store.progress] == ["ended"]


def test_failed_sessions_compensate_unless_the_submitter_said_not_to() -> None:
    for status in (SessionStatus.ABORTED, SessionStatus.CANCELLED):
        assert undoes(status, compensate_on_failure=False)
    assert undoes(SessionStatus.FAILED, compensate_on_failure=True)
    assert not undoes(SessionStatus.FAILED, compensate_on_failure=False)
    assert not undoes(SessionStatus.COMPLETED, compensate_on_failure=True)
