"""Which of a person's step commands (retry, skip, approve) apply to a step in which state.

One pure function decides, for the producer (``planloop retry|skip|approve`` and the SDK,
which refuse before anything is appended) and for the supervisor (which decides again when
the event arrives: the step may have moved on in between).
"""

from __future__ import annotations

from enum import StrEnum

from planloop.core.models import StepStatus


class StepCommand(StrEnum):
    """A person's command about one step (the ``command`` of an EXTERNAL_SIGNAL)."""

    RETRY = "retry"  # run a step that failed for good once more
    SKIP = "skip"  # give up a step: it and its dependents end skipped
    APPROVE = "approve"  # let a requires_approval step run


# failed for good, or cut short: what a person may run once more
RETRYABLE = frozenset({StepStatus.FAILED, StepStatus.INTERRUPTED})
# what has not run (an approval rejected), or failed: never a running or finished step
SKIPPABLE = RETRYABLE | {StepStatus.PENDING, StepStatus.READY}
# an approval lets a step start: only one that has not started
APPROVABLE = frozenset({StepStatus.PENDING, StepStatus.READY})

_APPLIES_TO = {
    StepCommand.RETRY: (RETRYABLE, "a failed or interrupted step"),
    StepCommand.SKIP: (SKIPPABLE, "a failed, interrupted, pending or ready step"),
    StepCommand.APPROVE: (APPROVABLE, "a pending or ready step that requires approval"),
}


def step_command_refusal(
    command: StepCommand,
    status: StepStatus | None,
    *,
    requires_approval: bool = False,
    approved: bool = False,
) -> str | None:
    """Why ``command`` cannot apply to a step in ``status`` (``None``: no such step), or
    ``None`` when it can.

    ``requires_approval`` and ``approved`` matter to ``approve`` only: the step must be
    marked ``requires_approval`` and not approved yet.
    """
    if status is None:
        return "the session has no such step"
    allowed, what = _APPLIES_TO[command]
    if status not in allowed:
        return f"it is {status.value}; {command.value} applies to {what}"
    if command == StepCommand.APPROVE and not requires_approval:
        return "it does not require approval (requires_approval is not set)"
    if command == StepCommand.APPROVE and approved:
        return "it is approved already"
    return None
