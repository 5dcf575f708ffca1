"""What ``continue`` accepts and what it runs again (producer/lineage.py), and the console's
fork and continue bodies (console/lineage_actions.py)."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core.models import SessionRecord, SessionStatus, StepState, StepStatus
from planloop.producer.lineage import compensated_steps, continue_refusal, reset_states


def ended(status: SessionStatus, error: str, report: dict[str, Any] | None = None) -> SessionRecord:
    return SessionRecord(id="s", status=status, error=error, report=report)


@pytest.mark.parametrize(
    "info",
    [
        ended(SessionStatus.FAILED, "session deadline of 5s passed; partial results kept"),
        ended(SessionStatus.ABORTED, "re-plan budget spent (3/3): forced ABORT"),
        ended(SessionStatus.ABORTED, "token budget spent (120 of 100 tokens): forced ABORT"),
    ],
)
def test_a_session_its_deadline_or_a_budget_ended_may_be_continued(info: SessionRecord) -> None:
    assert continue_refusal(info, leased=False) is None


@pytest.mark.parametrize(
    ("info", "leased", "why"),
    [
        (SessionRecord(id="s", status=SessionStatus.RUNNING), False, "still running"),
        (ended(SessionStatus.FAILED, "session deadline of 5s passed"), True, "still running"),
        (ended(SessionStatus.COMPLETED, ""), False, "only a session that ended failed"),
        (ended(SessionStatus.CANCELLED, "cancelled by user"), False, "only a session"),
        (ended(SessionStatus.FAILED, "step w1 failed for good"), False, "fork it instead"),
    ],
)
def test_other_sessions_are_refused_naming_why(info: SessionRecord, leased: bool, why: str) -> None:
    refusal = continue_refusal(info, leased=leased)
    assert refusal is not None
    assert why in refusal


def test_what_did_not_complete_runs_again_and_so_does_an_undone_write() -> None:
    states = {
        "done": StepState(status=StepStatus.COMPLETED, attempt=1),
        "undone": StepState(status=StepStatus.COMPLETED, attempt=1),
        "kept": StepState(status=StepStatus.COMPLETED, attempt=2),  # its undo failed
        "failed": StepState(status=StepStatus.FAILED, attempt=3, note="final"),
        "cancelled": StepState(status=StepStatus.CANCELLED, attempt=1),
        "skipped": StepState(status=StepStatus.SKIPPED),
        "never": StepState(),
    }
    info = ended(
        SessionStatus.FAILED,
        "session deadline of 1s passed",
        {
            "compensations": [
                {"step": "undone", "status": "completed"},
                {"step": "kept", "status": "failed"},
            ]
        },
    )
    reset = reset_states(states, compensated_steps(info))
    assert sorted(reset) == ["cancelled", "failed", "undone"]
    assert all(st.status == StepStatus.PENDING for st in reset.values())
    assert reset["failed"].attempt == 3  # the next attempt is the fourth
    assert reset["failed"].note == ""


def test_the_consoles_bodies_are_checked() -> None:
    from planloop.console.lineage_actions import _number

    assert _number({"version": 2}, "version", int) == 2
    assert _number({"version": ""}, "version", int) is None
    assert _number({}, "deadline_s", float) is None
    for bad in ({"version": 1.5}, {"version": True}, {"version": "2"}):
        with pytest.raises(ValueError, match="version"):
            _number(bad, "version", int)
