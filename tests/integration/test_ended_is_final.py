"""Ended is final: no path reopens or rewrites a session that ended, in any terminal state.

Each terminal state (completed, failed, aborted, cancelled) is reached with a write step,
then announced again on the inbox, offered for takeover (lease deleted, back in the active
set) and offered to the rebuild-from-SQL path; its status, error, report and compensations
stay as they were in Redis and in SQL. Plus the cancels that used to lose: one sent late in
a step, and one sent to a session no supervisor has taken yet.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from planloop.core.errors import SessionEndedError
from planloop.core.models import SessionOptions, SessionStatus, StepStatus
from planloop.planner.plan import parse_plan
from planloop.supervisor.io.rebuild import rebuild_lost_sessions, rebuild_session
from planloop.supervisor.process.service import Supervisor
from planloop.workers.toolsets import bench  # noqa: F401  (registers the tools here)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, wait_ended
from tests.integration.test_cli import planloop

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

WRITE_THEN_HOLD = """
goal: a write, then a long step
steps:
  - {id: w, tool: bench.write, params: {label: kept}}
  - {id: hold, tool: bench.sleep, params: {seconds: 30}, dependencies: [w], timeout_s: 60}
"""
WRITE_ONLY = """
goal: one write
steps:
  - {id: w, tool: bench.write, params: {label: done}}
"""
WRITE_THEN_FAIL = """
goal: a write, then a critical step that fails for good (aborted with no re-plan left)
steps:
  - {id: w, tool: bench.write, params: {label: undone}}
  - id: bad
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    dependencies: [w]
    critical: true
"""
LATE_CANCEL = """
goal: a three-second write cancelled two seconds in
steps:
  - {id: w, tool: bench.write, params: {label: late, seconds: 3}, timeout_s: 30}
"""


def snapshot(ps: PrivateStack, sid: str) -> dict[str, Any]:
    """What must never change once a session ended: status, error, report (with its
    compensations) and finish time, in Redis and in SQL."""
    hot: dict[str, str] = ps.redis.hgetall(ps.keys.session(sid))  # type: ignore[assignment]
    row = ps.record.session(sid)
    assert row is not None
    return {
        "redis": {k: hot.get(k) for k in ("status", "error", "report", "finished_at", "epoch")},
        "sql": {
            "status": row.status,
            "error": row.error,
            "report": row.report,
            "finished_at": row.finished_at,
        },
    }


def hold_running(ps: PrivateStack, sid: str, step: str = "hold") -> None:
    wait_for(
        lambda: (
            ps.step_states(sid, [step]).get(step) is not None
            and ps.step_states(sid, [step])[step].status == StepStatus.RUNNING
            and ps.step_states(sid, [step])[step].started_at > 0
        ),
        60,
        f"{step} to run",
    )


def ended_sessions(ps: PrivateStack) -> dict[SessionStatus, str]:
    """One session in each terminal state, each after a completed write."""
    sids = {}
    sids[SessionStatus.COMPLETED] = ps.producer.submit(parse_plan(WRITE_ONLY))
    sids[SessionStatus.FAILED] = ps.producer.submit(
        parse_plan(WRITE_THEN_HOLD), SessionOptions(deadline_s=1.0)
    )
    sids[SessionStatus.ABORTED] = ps.producer.submit(
        parse_plan(WRITE_THEN_FAIL), SessionOptions(max_replans=0)
    )
    sids[SessionStatus.CANCELLED] = cancelled = ps.producer.submit(parse_plan(WRITE_THEN_HOLD))
    hold_running(ps, cancelled)
    ps.producer.cancel(cancelled, "stop")
    for status, sid in sids.items():
        record = wait_ended(ps.producer, sid, 60)
        assert record.status == status, (status, record.error)
    return sids


def test_no_path_reopens_or_rewrites_an_ended_session(private_stack: MakeStack) -> None:
    ps = private_stack(workers=1, supervisors=1)
    sids = ended_sessions(ps)
    for status in (SessionStatus.ABORTED, SessionStatus.CANCELLED):
        comps = json.loads(ps.record.session(sids[status]).report or "{}")["compensations"]  # type: ignore[union-attr]
        assert [c["status"] for c in comps] == ["completed"], (status, comps)
    before = {sid: snapshot(ps, sid) for sid in sids.values()}

    # 1. The inbox announces each again; 2. a takeover: no lease, back in the active set.
    for sid in sids.values():
        ps.redis.xadd(ps.keys.inbox, {"sid": sid})
        ps.redis.delete(ps.keys.lease(sid))
        ps.redis.sadd(ps.keys.active, sid)
    wait_for(
        lambda: (
            not any(ps.redis.sismember(ps.keys.active, sid) for sid in sids.values())
            and ps.redis.xlen(ps.keys.inbox) == 0
        ),
        30,
        "the supervisor to drop the ended sessions from the active set and the inbox",
    )
    # A session announced after them runs to its end: the supervisor went past them.
    sentinel = ps.producer.submit(parse_plan(WRITE_ONLY))
    assert wait_ended(ps.producer, sentinel, 60).status == SessionStatus.COMPLETED

    # 3. The rebuild path, run here against the same Redis and SQL: asked directly, and
    # with each session's hot state gone (as after a Redis loss).
    async def rebuild() -> tuple[list[bool], list[str]]:
        sup = Supervisor(ps.settings, name="test-rebuild")
        try:
            direct = [await rebuild_session(sup.ctx, sup.store, sid) for sid in sids.values()]
            for sid in sids.values():
                await sup.store.r.rename(ps.keys.session(sid), f"{ps.keys.session(sid)}:kept")
            lost = await rebuild_lost_sessions(sup.ctx, sup.store)
            for sid in sids.values():
                assert not await sup.store.r.exists(ps.keys.session(sid))
                await sup.store.r.rename(f"{ps.keys.session(sid)}:kept", ps.keys.session(sid))
            return direct, lost
        finally:
            sup.ctx.dispatcher.close()
            await sup.store.r.aclose()

    direct, lost = asyncio.run(rebuild())
    assert direct == [False] * len(sids)
    assert not set(lost) & set(sids.values())

    after = {sid: snapshot(ps, sid) for sid in sids.values()}
    assert after == before
    for sid in sids.values():
        assert not ps.redis.sismember(ps.keys.active, sid)
    # The supervisor is alive and never took an ended session again.
    assert all(p.poll() is None for p in ps.supervisors + ps.workers)
    for status, sid in sids.items():
        assert set(ps.takeovers(sid)) == {1}, (status, ps.takeovers(sid))
    with pytest.raises(SessionEndedError):
        ps.producer.cancel(sids[SessionStatus.COMPLETED])

    # An owner that died between the record's end and Redis's: Redis says running, SQL says
    # ended. The takeover brings Redis in line with the record and reopens nothing.
    sid = sids[SessionStatus.ABORTED]
    ps.redis.hset(ps.keys.session(sid), "status", "running")
    ps.redis.sadd(ps.keys.active, sid)
    wait_for(
        lambda: (
            ps.redis.hget(ps.keys.session(sid), "status") == "aborted"
            and not ps.redis.sismember(ps.keys.active, sid)
        ),
        30,
        "the hot state to follow the record",
    )
    assert snapshot(ps, sid)["sql"] == before[sid]["sql"]
    hot = ps.redis.hgetall(ps.keys.session(sid))
    assert json.loads(hot["report"]) == json.loads(before[sid]["sql"]["report"])  # type: ignore[index]
    assert hot["error"] == before[sid]["sql"]["error"]  # type: ignore[index]


def test_late_cancel_wins_and_compensates(private_stack: MakeStack) -> None:
    """A cancel two seconds into a three-second write: the write lands (a tool call cannot
    be taken back halfway), so it is undone once; the session ends cancelled."""
    ps = private_stack(workers=1, supervisors=1)
    sid = ps.producer.submit(parse_plan(LATE_CANCEL))
    hold_running(ps, sid, "w")
    started = ps.step_states(sid, ["w"])["w"].started_at
    wait_for(lambda: ps.redis.time()[0] >= started + 2, 10, "two seconds into the step")
    ps.producer.cancel(sid, "late cancel")

    record = wait_ended(ps.producer, sid, 60)
    assert record.status == SessionStatus.CANCELLED, record.error
    assert record.error == "late cancel"
    assert record.report is not None
    assert [(c["step"], c["status"]) for c in record.report["compensations"]] == [
        ("w", "completed")
    ]
    assert ps.effects.count(f"{sid}:w") == 1
    assert ps.effects.count(f"{sid}:w:compensate:undo") == 1
    before = snapshot(ps, sid)

    # Announcing it again afterwards changes nothing (it used to reopen and compensate).
    ps.redis.xadd(ps.keys.inbox, {"sid": sid})
    wait_for(lambda: ps.redis.xlen(ps.keys.inbox) == 0, 30, "the inbox to be read")
    sentinel = ps.producer.submit(parse_plan(WRITE_ONLY))
    assert wait_ended(ps.producer, sentinel, 60).status == SessionStatus.COMPLETED
    assert snapshot(ps, sid) == before
    assert ps.effects.count(f"{sid}:w:compensate:undo") == 1


def test_cancel_of_a_session_no_supervisor_took(private_stack: MakeStack) -> None:
    """Cancelled while pending with no supervisor running: it ends cancelled when one comes,
    and nothing of its plan ever runs."""
    ps = private_stack(workers=1, supervisors=0)
    sid = ps.producer.submit(parse_plan(WRITE_THEN_HOLD))

    said = planloop(ps.settings.to_env(), "cancel", sid, "--reason", "never mind")
    assert said.returncode == 0, said.stderr
    assert "it never started" in said.stdout
    assert ps.producer.session(sid).status == SessionStatus.PENDING
    ps.start_supervisor()

    record = wait_ended(ps.producer, sid, 60)
    assert record.status == SessionStatus.CANCELLED
    assert record.error == "never mind"
    assert ps.effects.count(f"{sid}:w") == 0
    assert record.report is not None
    assert record.report["compensations"] == []
    assert {s["status"] for s in record.report["steps"]} == {"cancelled"}
    row = ps.record.session(sid)
    assert row is not None
    assert row.status == "cancelled"
    assert not ps.redis.sismember(ps.keys.active, sid)
    again = planloop(ps.settings.to_env(), "cancel", sid)
    assert again.returncode != 0
    assert "has ended (cancelled)" in again.stderr
