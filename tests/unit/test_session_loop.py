"""The session loop's decisions as functions of its state: ready steps, back-offs, failure
rules, when the session ends, what a checkpoint takes. No Redis, no workers."""

from __future__ import annotations

import pytest

from planloop.core.models import ErrorKind, EventType, SessionStatus, Severity, StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.session.failures import settle_failure
from planloop.supervisor.session.schedule import ready_steps
from planloop.supervisor.session.state import FINAL, session_end
from planloop.supervisor.session.waiting import wait_ms
from tests.unit.loop_fixtures import Loop, step

NOW = 1_000.0


def chain() -> Plan:
    """a → b → c, and d on its own."""
    return Plan(steps=[step("a"), step("b", "a"), step("c", "b"), step("d")])


# --- ready steps ---------------------------------------------------------------------------
def test_ready_steps_are_those_whose_dependencies_completed_in_plan_order() -> None:
    loop = Loop(chain())
    assert ready_steps(loop.state, NOW, concurrency=10) == ["a", "d"]
    loop.state.states["a"].status = StepStatus.COMPLETED
    loop.state.candidates.update(loop.state.dependents["a"])
    assert ready_steps(loop.state, NOW, concurrency=10) == ["b", "d"]


def test_ready_steps_stop_at_the_concurrency_cap_counting_what_runs() -> None:
    loop = Loop(Plan(steps=[step(i) for i in "abcde"]), a=StepStatus.RUNNING)
    assert ready_steps(loop.state, NOW, concurrency=3) == ["b", "c"]
    assert ready_steps(loop.state, NOW, concurrency=1) == []


def test_a_step_that_needs_approval_waits_and_is_noted_once_for_announcing() -> None:
    loop = Loop(Plan(steps=[step("a", requires_approval=True), step("b")]))
    assert ready_steps(loop.state, NOW, concurrency=10) == ["b"]
    assert loop.state.awaiting_approval == {"a"}
    loop.state.approved.add("a")
    assert ready_steps(loop.state, NOW, concurrency=10) == ["a", "b"]


def test_a_retry_is_ready_when_its_back_off_ends_and_the_wait_shortens_to_it() -> None:
    loop = Loop(Plan(steps=[step("a")]), a=StepStatus.READY)
    loop.state.states["a"].not_before = NOW + 0.25
    assert ready_steps(loop.state, NOW, concurrency=10) == []
    assert wait_ms(loop.state, NOW) == 250
    assert ready_steps(loop.state, NOW + 0.25, concurrency=10) == ["a"]
    assert wait_ms(loop.state, NOW + 0.3) is None  # back-off over: nothing to wake for


# --- failure rules ---------------------------------------------------------------------------
def fail(loop: Loop, step_id: str, kind: ErrorKind, attempt: int = 1) -> None:
    st = loop.state.states[step_id]
    st.status, st.error_kind, st.attempt, st.error = StepStatus.FAILED, kind, attempt, "boom"


def settle(loop: Loop, step_id: str, max_retries: int = 2):  # type: ignore[no-untyped-def]
    return settle_failure(
        loop.state,
        step_id,
        max_retries=max_retries,
        backoff_base_s=1.0,
        backoff_max_s=8.0,
        now=NOW,
    )


def test_a_transient_failure_within_the_budget_is_retried_after_a_back_off() -> None:
    loop = Loop(Plan(steps=[step("a")]))
    fail(loop, "a", ErrorKind.TRANSIENT, attempt=2)
    settled = settle(loop, "a")
    st = loop.state.states["a"]
    assert settled.retry
    assert settled.final is None
    assert (st.status, st.not_before) == (StepStatus.READY, NOW + 2.0)
    assert settled.fields == {"status": StepStatus.READY, "not_before": NOW + 2.0}
    assert "a" in loop.state.backing_off
    assert ready_steps(loop.state, NOW + 2.0, concurrency=1) == ["a"]


@pytest.mark.parametrize(
    ("kind", "attempt", "critical", "severity"),
    [
        (ErrorKind.PERMANENT, 1, False, Severity.WARNING),  # retrying cannot help
        (ErrorKind.TRANSIENT, 3, False, Severity.WARNING),  # the budget is spent
        (ErrorKind.TIMEOUT, 3, True, Severity.CRITICAL),  # critical: decided at once
    ],
)
def test_a_final_failure_is_noted_for_the_deliberation(
    kind: ErrorKind, attempt: int, critical: bool, severity: Severity
) -> None:
    loop = Loop(Plan(steps=[step("a", critical=critical)]))
    fail(loop, "a", kind, attempt)
    settled = settle(loop, "a")
    assert not settled.retry
    assert loop.state.states["a"].note == FINAL
    assert settled.final is not None
    assert (settled.final.type, settled.final.severity) == (EventType.TASK_FAILED, severity)
    assert settled.final.payload == {"error_kind": kind, "tool": "t.a"}


def test_a_lost_attempt_out_of_retries_stays_interrupted() -> None:
    loop = Loop(Plan(steps=[step("a")]))
    fail(loop, "a", ErrorKind.LOST, attempt=1)
    loop.state.states["a"].status = StepStatus.INTERRUPTED
    settled = settle(loop, "a", max_retries=0)
    assert settled.final is not None
    assert settled.final.type == EventType.TASK_INTERRUPTED
    assert loop.state.states["a"].status == StepStatus.INTERRUPTED


# --- the end ----------------------------------------------------------------------------------
def test_the_session_completes_around_failed_steps_once_every_step_has_ended() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b")]), a=StepStatus.COMPLETED, b=StepStatus.RUNNING)
    assert session_end(loop.state, None, deliberating=False, now=NOW) is None
    loop.state.states["b"].status, loop.state.states["b"].note = StepStatus.FAILED, FINAL
    assert session_end(loop.state, None, deliberating=True, now=NOW) is None
    assert session_end(loop.state, None, deliberating=False, now=NOW) == (
        SessionStatus.COMPLETED,
        "completed around failed steps: b",
    )


def test_the_session_fails_past_its_deadline_with_work_left() -> None:
    loop = Loop(Plan(steps=[step("a")]), a=StepStatus.RUNNING)
    loop.state.info = loop.state.info.model_copy(update={"started_at": NOW})
    assert session_end(loop.state, 10.0, deliberating=False, now=NOW + 5) is None
    ended = session_end(loop.state, 10.0, deliberating=False, now=NOW + 11)
    assert ended is not None
    assert ended[0] == SessionStatus.FAILED
    assert "deadline of 10s passed" in ended[1]


def test_a_checkpoint_takes_the_batch_and_rows_of_steps_that_changed() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b")]), a=StepStatus.COMPLETED, b=StepStatus.READY)
    loop.state.dirty |= {"a", "b"}
    loop.state.acks.append("1-0")
    batch, acks = loop.state.take_checkpoint()
    assert acks == ["1-0"]
    assert [row["step_id"] for row in batch.attempts] == ["a"]  # b is between attempts
    assert not loop.state.dirty
    assert not loop.state.acks
    assert not loop.state.batch.attempts
