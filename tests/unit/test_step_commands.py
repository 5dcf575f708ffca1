"""The one rule for retry/skip/approve, shared by the producer and the supervisor."""

from __future__ import annotations

import pytest

from planloop.core.errors import CommandRefusedError
from planloop.core.models import StepStatus
from planloop.core.step_commands import StepCommand, step_command_refusal

S = StepStatus
ALL = list(StepStatus)


@pytest.mark.parametrize("status", ALL)
def test_retry_applies_to_failed_and_interrupted_steps_only(status: StepStatus) -> None:
    refusal = step_command_refusal(StepCommand.RETRY, status)
    if status in (S.FAILED, S.INTERRUPTED):
        assert refusal is None
    else:
        assert refusal == f"it is {status}; retry applies to a failed or interrupted step"


@pytest.mark.parametrize("status", ALL)
def test_skip_never_applies_to_a_running_or_finished_step(status: StepStatus) -> None:
    refusal = step_command_refusal(StepCommand.SKIP, status)
    allowed = status in (S.FAILED, S.INTERRUPTED, S.PENDING, S.READY)
    assert (refusal is None) is allowed, refusal


@pytest.mark.parametrize("status", ALL)
def test_approve_applies_to_a_step_that_has_not_started(status: StepStatus) -> None:
    refusal = step_command_refusal(StepCommand.APPROVE, status, requires_approval=True)
    assert (refusal is None) is (status in (S.PENDING, S.READY)), refusal


def test_approve_needs_requires_approval_and_no_approval_yet() -> None:
    assert step_command_refusal(StepCommand.APPROVE, S.PENDING) == (
        "it does not require approval (requires_approval is not set)"
    )
    approved = step_command_refusal(
        StepCommand.APPROVE, S.PENDING, requires_approval=True, approved=True
    )
    assert approved == "it is approved already"


@pytest.mark.parametrize("command", list(StepCommand))
def test_no_command_applies_to_a_step_that_does_not_exist(command: StepCommand) -> None:
    assert step_command_refusal(command, None) == "the session has no such step"


def test_the_refusal_names_session_step_and_state() -> None:
    exc = CommandRefusedError("s1", "retry", "b", "completed", "it is completed; ...")
    assert (
        str(exc) == "cannot retry step 'b' of session s1: it is completed; ... (nothing was sent)"
    )
    assert (exc.session_id, exc.step_id, exc.state, exc.command) == (
        "s1",
        "b",
        "completed",
        "retry",
    )
