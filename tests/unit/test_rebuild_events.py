"""Completion events written back from attempt rows after Redis lost the events."""

from __future__ import annotations

from planloop.core.models import EventType
from planloop.core.record import EventRow, StepAttemptRow
from planloop.supervisor.io.rebuild import completions_without_event


def attempt(step_id: str, n: int, status: str = "completed") -> StepAttemptRow:
    return StepAttemptRow(
        session_id="s", step_id=step_id, attempt=n, status=status, finished_at=5.0
    )


def event(step_id: str, n: int, type_: EventType) -> EventRow:
    return EventRow(session_id="s", event_id=f"1-{n}", type=type_.value, step_id=step_id, attempt=n)


def test_only_completed_attempts_without_a_completion_event_get_one() -> None:
    attempts = [
        attempt("a", 1),  # has its event
        attempt("b", 2),  # event lost
        attempt("c", 1, "failed"),  # not a completion
        attempt("d", 1),  # an unexpected result counts as its completion
    ]
    events = [
        event("a", 1, EventType.TASK_COMPLETED),
        event("b", 1, EventType.TASK_COMPLETED),  # an earlier attempt's event is not this one's
        event("d", 1, EventType.TASK_UNEXPECTED_RESULT),
    ]

    recovered = completions_without_event(attempts, events)

    assert [(e.step_id, e.attempt, e.type) for _, e in recovered] == [
        ("b", 2, EventType.TASK_COMPLETED)
    ]
    event_id, ev = recovered[0]
    assert event_id.startswith("rebuilt-")
    assert len(event_id) <= 32
    assert ev.occurred_at == 5.0
    assert completions_without_event(attempts, events)[0][0] == event_id  # stable id: upsert


def test_nothing_to_recover_when_every_completion_has_its_event() -> None:
    assert (
        completions_without_event([attempt("a", 1)], [event("a", 1, EventType.TASK_COMPLETED)])
        == []
    )
