"""Parked sessions: a session with nothing to do until an event waits without a timer of
its own, and each kind of event (an approval, a signal, a cancel, a step's outcome) or a due
timer (its deadline) wakes it at once through the supervisor's one reader."""

from __future__ import annotations

import time

import pytest

from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import Plan, Step
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, wait_ended

pytestmark = pytest.mark.integration

GATE = "gate"
PARKED_S = 2.5  # longer than any poll the loop used to make: it must be woken, not find it
WAKE_S = 10.0  # generous: what is checked is that it wakes, not how fast


def gated(*extra: Step) -> Plan:
    return Plan(
        goal="parked session",
        steps=[
            Step(id=GATE, tool="bench.echo", params={"value": "opened"}, requires_approval=True),
            *extra,
        ],
    )


def park(ps: PrivateStack, plan: Plan, options: SessionOptions | None = None) -> str:
    sid = ps.producer.submit(plan, options or SessionOptions())
    wait_for(
        lambda: ps.hot.steps(sid, [GATE])[GATE].note == "awaiting approval",
        20,
        "the session to wait for its approval",
    )
    time.sleep(PARKED_S)
    assert not ps.producer.session(sid).status.ended
    return sid


def test_parked_sessions_wake_on_an_approval_a_signal_a_cancel_and_an_outcome(
    private_stack: MakeStack,
) -> None:
    ps = private_stack()
    slow = Step(id="slow", tool="bench.sleep", params={"seconds": PARKED_S})
    approved, signalled, cancelled = park(ps, gated()), park(ps, gated()), park(ps, gated())
    outcome = park(ps, gated(slow))

    ps.producer.approve(approved, step=GATE)
    ps.producer.signal(signalled, "new constraint: keep it short")
    ps.producer.cancel(cancelled, "parked cancel")

    record = wait_ended(ps.producer, approved, WAKE_S)
    assert record.status == SessionStatus.COMPLETED, record.error
    record = wait_ended(ps.producer, cancelled, WAKE_S)
    assert record.status == SessionStatus.CANCELLED
    wait_for(
        lambda: any(
            e.description == "new constraint: keep it short" for e in ps.record.events(signalled)
        ),
        WAKE_S,
        "the signal to be applied and recorded",
    )
    # The long step ran while its session waited for the gate; its outcome wakes the
    # session, which records it (and still waits for the gate).
    wait_for(
        lambda: ps.hot.steps(outcome, ["slow"])["slow"].status.value == "completed",
        WAKE_S + PARKED_S,
        "the long step's outcome to be applied",
    )
    ps.producer.approve(outcome, step=GATE)
    record = wait_ended(ps.producer, outcome, WAKE_S)
    assert record.status == SessionStatus.COMPLETED, record.error


def test_a_parked_session_wakes_when_its_deadline_is_due(private_stack: MakeStack) -> None:
    ps = private_stack()
    sid = ps.producer.submit(gated(), SessionOptions(deadline_s=PARKED_S + 1.0))
    record = wait_ended(ps.producer, sid, PARKED_S + 1.0 + WAKE_S)
    assert record.status == SessionStatus.FAILED
    assert "deadline" in (record.error or "")
