"""Poison sessions end: one bad value no longer makes a session impossible to end.

Each poison input is written straight to Redis (whatever submit accepts, the supervisor must
survive what is there). With ``max_session_crashes=2`` and a short cool-off, a session whose
loop keeps crashing ends ``failed`` with the error in its report, its completed writes
compensated and the event that crashed it dead-lettered with the cause; the processes stay up.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from planloop.core.models import Event, EventType, SessionOptions, SessionStatus, StepStatus
from planloop.planner.plan import parse_plan
from planloop.workers.toolsets import bench  # noqa: F401  (registers the tools here)
from tests.conftest import TEST_PG_URL, wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps, wait_ended

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

POISON = {
    "max_session_crashes": 2,
    "session_crash_cool_off_s": 0.2,
    "session_crash_cool_off_max_s": 0.5,
}
WRITE_THEN_HOLD = """
goal: a write, then a step that holds the session open
steps:
  - {id: w, tool: bench.write, params: {label: first}}
  - {id: hold, tool: bench.sleep, params: {seconds: 30}, dependencies: [w], timeout_s: 60}
"""
WRITE_THEN_SHORT = """
goal: a write, then a short step
steps:
  - {id: w, tool: bench.write, params: {label: first}}
  - {id: short, tool: bench.sleep, params: {seconds: 1.5}, dependencies: [w]}
"""
WRITE_THEN_SLOW = """
goal: a write, then a step long enough to lose the session hash under
steps:
  - {id: w, tool: bench.write, params: {label: first}}
  - {id: slow, tool: bench.sleep, params: {seconds: 4}, dependencies: [w]}
"""


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


def store_raw(
    ps: PrivateStack, plan: dict[str, Any], goal: str = "poison", *, checked: bool = False
) -> str:
    """A session whose plan JSON goes to Redis as is, past every submit-time check.

    ``checked``: noted as validated by the producer, so the supervisor's own input check
    trusts it (planner/input_check.py) and the loop is what meets the poison: a crash.
    Unchecked, a plan past the limits is refused before the session starts.
    """
    sid = f"poison-{uuid.uuid4().hex[:8]}"
    ps.hot.create_session(
        sid, plan_json=json.dumps(plan), goal=goal, options=SessionOptions(), checked=checked
    )
    return sid


def dead_letters(ps: PrivateStack, sid: str) -> list[dict[str, str]]:
    entries: list[tuple[str, dict[str, str]]] = ps.redis.xrange(ps.keys.deadletter)  # type: ignore[assignment]
    return [fields for _id, fields in entries if fields.get("sid") == sid]


def assert_alive(ps: PrivateStack) -> None:
    assert all(p.poll() is None for p in ps.supervisors + ps.workers)


def test_params_nested_past_the_parser_limit_end_the_session(private_stack: MakeStack) -> None:
    ps = private_stack(**POISON)
    plan = {
        "goal": "params nested 220 deep",
        "steps": [{"id": "deep", "tool": "bench.echo", "params": {"value": nested(220)}}],
    }
    sid = store_raw(ps, plan, checked=True)

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.FAILED
    assert "crashed 2 times" in record.error
    assert "ValidationError" in record.error
    assert "recursion" in record.error.lower()
    assert "bottom" not in record.error  # the error names the problem, not the raw value
    assert record.report is not None
    assert record.report["error"] == record.error
    assert record.report["compensations"] == []
    row = ps.record.session(sid)
    assert row is not None
    assert (row.status, row.error) == ("failed", record.error)
    assert ps.redis.hget(ps.keys.session(sid), "crashes") == "2"
    assert not ps.redis.sismember(ps.keys.active, sid)
    assert_alive(ps)


def test_a_timeout_too_large_to_wait_on_fails_the_step(private_stack: MakeStack) -> None:
    """The worker overflowed on timeout_s 1e300 and recorded nothing: the step stayed running
    forever. Now the attempt fails for good and the session ends with the error."""
    ps = private_stack(**POISON)
    plan = {
        "goal": "a timeout of 1e300",
        "steps": [
            {"id": "w", "tool": "bench.write", "params": {"label": "first"}},
            {
                "id": "huge",
                "tool": "bench.sleep",
                "params": {"seconds": 0.01},
                "timeout_s": 1e300,
                "critical": True,
                "dependencies": ["w"],
            },
        ],
    }
    sid = store_raw(ps, plan)

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.FAILED
    # The plan schema holds timeout_s to max_step_timeout_s, so the supervisor refuses to
    # read this plan: it ends failed naming the field instead of wedging on the worker.
    assert "timeout_s" in record.error
    assert "1e+300" in record.error
    assert_alive(ps)


def test_an_event_with_a_nan_time_is_dead_lettered_and_the_session_goes_on(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(**POISON)
    sid = ps.producer.submit(parse_plan(WRITE_THEN_SHORT))
    wait_for(
        lambda: (
            ps.step_states(sid, ["w"]).get("w") is not None
            and ps.step_states(sid, ["w"])["w"].status == StepStatus.COMPLETED
        ),
        30,
        "the write to complete",
    )
    fields = Event(type=EventType.EXTERNAL_SIGNAL, description="poison").to_fields()
    ps.redis.xadd(ps.keys.events(sid), {**fields, "occurred_at": "nan"})

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.COMPLETED, record.error
    letters = wait_for(lambda: dead_letters(ps, sid), 10, "the dead letter")
    assert len(letters) == 1
    assert "occurred_at" in letters[0]["cause"]
    assert json.loads(letters[0]["event"])["description"] == "poison"
    assert ps.redis.hget(ps.keys.session(sid), "crashes") is None  # no crash loop
    assert_alive(ps)


def test_an_event_that_crashes_the_loop_ends_the_session_and_undoes_its_write(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(**POISON)
    sid = ps.producer.submit(parse_plan(WRITE_THEN_HOLD))
    wait_for(
        lambda: (
            ps.step_states(sid, ["hold"]).get("hold") is not None
            and ps.step_states(sid, ["hold"])["hold"].status == StepStatus.RUNNING
        ),
        30,
        "the holding step to run",
    )
    attempt = ps.step_states(sid, ["hold"])["hold"].attempt
    poison = Event(
        type=EventType.TASK_COMPLETED,
        step_id="hold",
        attempt=attempt,
        payload={"started_at": "not a time"},
    )
    ps.redis.xadd(ps.keys.events(sid), poison.to_fields())  # type: ignore[arg-type]

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.FAILED
    assert "crashed 2 times" in record.error
    assert "ValueError" in record.error
    assert record.report is not None
    assert [(c["step"], c["status"]) for c in record.report["compensations"]] == [
        ("w", "completed")
    ]
    assert ps.effects.count(f"{sid}:w:compensate:undo") == 1
    assert report_steps(record)["hold"]["status"] == "cancelled"
    letters = dead_letters(ps, sid)
    assert len(letters) == 1
    assert "ValueError" in letters[0]["cause"]
    assert json.loads(letters[0]["event"])["step_id"] == "hold"
    row = ps.record.session(sid)
    assert row is not None
    assert row.status == "failed"
    assert_alive(ps)


def test_cancel_ends_a_crash_looping_session(private_stack: MakeStack) -> None:
    ps = private_stack(
        max_session_crashes=1000, session_crash_cool_off_s=0.2, session_crash_cool_off_max_s=0.2
    )
    plan = {
        "goal": "crashes until cancelled",
        "steps": [{"id": "deep", "tool": "bench.echo", "params": {"value": nested(220)}}],
    }
    sid = store_raw(ps, plan, checked=True)
    wait_for(
        lambda: int(ps.redis.hget(ps.keys.session(sid), "crashes") or 0) >= 2,
        30,
        "the session's loop to crash twice",
    )

    ps.producer.cancel(sid, "stop the loop")

    record = wait_ended(ps.producer, sid, 30)
    assert record.status == SessionStatus.CANCELLED
    assert record.error == "stop the loop"
    assert_alive(ps)


@pytest.mark.postgres
def test_a_goal_with_nul_runs_on_postgresql(private_stack: MakeStack) -> None:
    """PostgreSQL text cannot hold NUL; the record writes U+FFFD instead of wedging the claim."""
    ps = private_stack(database_url=TEST_PG_URL, **POISON)
    plan = {
        "goal": "a goal with a \x00 in it",
        "steps": [{"id": "e", "tool": "bench.echo", "params": {"value": 1}}],
    }
    sid = store_raw(ps, plan, goal=plan["goal"])  # type: ignore[arg-type]

    record = wait_ended(ps.producer, sid, 60)

    # The goal schema refuses control characters: the session ends failed, saying why,
    # instead of sitting pending on a PostgreSQL DataError.
    assert record.status == SessionStatus.FAILED
    assert "control character" in record.error
    row = ps.record.session(sid)
    assert row is not None
    assert row.status == "failed"
    assert_alive(ps)


def test_a_session_whose_hash_alone_was_lost_is_rebuilt_not_counted_as_crashing(
    private_stack: MakeStack,
) -> None:
    """Only the session hash vanished (its events stream and group survived): the rebuild
    path restores it (a surviving group used to fail the rebuild) and no crash is counted."""
    ps = private_stack(**POISON)
    sid = ps.producer.submit(parse_plan(WRITE_THEN_SLOW))
    wait_for(
        lambda: (
            ps.step_states(sid, ["slow"]).get("slow") is not None
            and ps.step_states(sid, ["slow"])["slow"].status == StepStatus.RUNNING
            and ps.record.session(sid) is not None
        ),
        30,
        "the slow step to run",
    )
    ps.redis.delete(ps.keys.session(sid))
    wait_for(lambda: ps.redis.exists(ps.keys.session(sid)), 30, "the hot state to be rebuilt")

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.COMPLETED, record.error
    assert ps.redis.hget(ps.keys.session(sid), "crashes") is None
    assert ps.effects.count(f"{sid}:w") == 1
    assert report_steps(record)["w"]["attempts"] == 1  # the write did not run again
    assert any("rebuilt from SQL" in ps.supervisor_log(p) for p in ps.supervisors)
    assert_alive(ps)
