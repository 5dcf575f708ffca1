"""The waiting decision: a session with nothing due parks (no time at all); back-offs,
the deadline and work in flight set the time it looks again."""

from __future__ import annotations

from planloop.core.models import StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.session.waiting import DEADLINE_SLACK_S, POLL_S, wait_ms, wake_at
from tests.unit.loop_fixtures import Loop, step

NOW = 1_000.0


def test_a_session_waiting_for_an_approval_parks_without_a_time() -> None:
    loop = Loop(Plan(steps=[step("a", requires_approval=True)]))
    assert wake_at(loop.state, NOW, default_deadline_s=None) is None
    assert wait_ms(loop.state, NOW) is None


def test_attempts_in_flight_wake_the_session_when_the_watchdog_says_or_every_poll() -> None:
    running = Loop(Plan(steps=[step("a")]), a=StepStatus.RUNNING)
    assert wait_ms(running.state, NOW) == int(POLL_S * 1000)  # nobody said when: the poll
    assert wait_ms(running.state, NOW, look_at=NOW + 42.0, watched=True) == 42_000
    assert wait_ms(running.state, NOW, look_at=None, watched=True) is None


def test_a_back_off_wakes_the_session_when_it_ends_then_it_parks_again() -> None:
    loop = Loop(Plan(steps=[step("a")]), a=StepStatus.READY)
    loop.state.states["a"].not_before = NOW + 30.0
    assert wait_ms(loop.state, NOW) == 30_000  # longer than the poll: no wake before it
    assert wait_ms(loop.state, NOW + 31.0) is None
    assert loop.state.backing_off == set()


def test_the_deadline_wakes_a_parked_session_just_after_it_passes() -> None:
    loop = Loop(Plan(steps=[step("a", requires_approval=True)]))
    loop.state.info.started_at = NOW - 10.0
    due = wake_at(loop.state, NOW, default_deadline_s=60.0)
    assert due == NOW + 50.0 + DEADLINE_SLACK_S
    info = loop.state.info
    options = info.options.model_copy(update={"deadline_s": 20.0})
    loop.state.info = info.model_copy(update={"options": options})  # its own deadline wins
    assert wake_at(loop.state, NOW, default_deadline_s=60.0) == (NOW + 10.0 + DEADLINE_SLACK_S)


def test_the_earliest_of_the_times_wins() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b", requires_approval=True)]), a=StepStatus.READY)
    loop.state.states["a"].not_before = NOW + 5.0
    loop.state.info.started_at = NOW
    assert wake_at(loop.state, NOW, default_deadline_s=3.0) == NOW + 3.0 + DEADLINE_SLACK_S
    assert wake_at(loop.state, NOW, default_deadline_s=None, look_at=NOW + 1.0) == NOW + 1.0
