"""How a step attempt ended, classified: the outcome the executor records, the kind of a
failure (which decides whether a retry can help) and what it says about the tool's health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import DBAPIError

from planloop.core.errors import (
    AgentStepStalled,
    LateEffectRefused,
    PermanentToolError,
    StoreWriteError,
    ToolTimeoutError,
)
from planloop.core.masking import error_text
from planloop.core.models import ErrorKind, EventType, StepStatus


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended."""

    status: StepStatus
    event: EventType
    output: Any = None
    error: str = ""
    error_kind: str = ""
    encoded: str | None = None  # the output's stored JSON, encoded once
    payload: dict[str, Any] = field(default_factory=dict)  # more for the event (LLM usage)


@dataclass(frozen=True)
class Attempt:
    """What :meth:`StepExecutor.execute` did with an attempt, for the task's Celery state."""

    result: str  # a StepStatus value, or "dropped" (stale, duplicate, or outcome fenced off)
    error: str = ""  # the outcome's masked error text
    error_kind: str = ""

    @property
    def failed(self) -> bool:
        """The attempt ran and did not complete (failed or interrupted)."""
        return self.result in (StepStatus.FAILED, StepStatus.INTERRUPTED)


DROPPED = Attempt("dropped")

# Kinds that say nothing about the tool's health: bad input, a deployment gap, a stalled
# loop, an open breaker, a store that refused the write (infrastructure, not the tool).
_NOT_THE_TOOLS = frozenset(
    {
        ErrorKind.PERMANENT,
        ErrorKind.UNAVAILABLE,
        ErrorKind.UNSERVED,
        ErrorKind.STALLED,
        ErrorKind.STORE,
    }
)
# Kinds that interrupt an attempt rather than fail it: nothing the tool did was wrong.
_INTERRUPTIONS = frozenset({ErrorKind.TIMEOUT, ErrorKind.STORE})


def tool_health(outcome: Outcome) -> bool | None:
    """What the outcome says about the tool's health (None: nothing, e.g. bad input)."""
    if outcome.error_kind in _NOT_THE_TOOLS:
        return None
    return outcome.status == StepStatus.COMPLETED


def classify_error(
    exc: BaseException, non_retryable: tuple[type[BaseException], ...] = ()
) -> ErrorKind:
    """Whether a failed attempt is worth another (within the step's ``max_retries``).

    As Celery's ``autoretry_for`` and Temporal's ``non_retryable_error_types`` have it: every
    exception is retried unless declared permanent, by being a :class:`PermanentToolError`
    (params that do not fit the tool's schema raise one: they cannot fit on a retry) or an
    instance of a class in the tool's ``non_retryable``. A plain ``ValueError`` is retried:
    a tool that knows better says so. A stalled agent step is permanent with a kind of its
    own, so the decider and the report can tell it from a tool's own failure. A store that
    refused a write (the effect ledger's :class:`StoreWriteError`, or a database error that
    escaped a tool) is ``STORE``: retried once the store recovers, outside the budget.
    """
    if isinstance(exc, AgentStepStalled):
        return ErrorKind.STALLED
    if isinstance(exc, StoreWriteError | DBAPIError):
        return ErrorKind.STORE
    if isinstance(exc, ToolTimeoutError | TimeoutError | LateEffectRefused):
        return ErrorKind.TIMEOUT
    if isinstance(exc, PermanentToolError) or (non_retryable and isinstance(exc, non_retryable)):
        return ErrorKind.PERMANENT
    return ErrorKind.TRANSIENT


def failed(exc: BaseException, kind: ErrorKind) -> Outcome:
    """The outcome of an attempt that raised ``exc``: interrupted (a timeout, a store
    fault) or failed."""
    message = f"{type(exc).__name__}: {error_text(exc)}"  # events, prompts, reports show it
    if kind in _INTERRUPTIONS:
        return Outcome(StepStatus.INTERRUPTED, EventType.TASK_INTERRUPTED, None, message, kind)
    return Outcome(StepStatus.FAILED, EventType.TASK_FAILED, None, message, kind)


def unavailable(tool: str) -> Outcome:
    """The outcome of an attempt whose tool's circuit breaker is open."""
    message = f"tool {tool!r} is unavailable: its circuit breaker is open"
    return Outcome(
        StepStatus.INTERRUPTED, EventType.TASK_INTERRUPTED, None, message, ErrorKind.UNAVAILABLE
    )
