"""Errors raised by or about a tool: :class:`ToolError` and its subclasses (the tree:
core/errors.py)."""

from __future__ import annotations

from planloop.core.error_base import PlanloopError, public


class ToolError(PlanloopError):
    """Raised by or about a tool."""


class UnknownToolError(ToolError):
    """No tool is registered under ``tool_name``."""

    def __init__(self, tool_name: str, known: list[str] | None = None) -> None:
        self.tool_name = tool_name
        hint = f"; known tools: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown tool {tool_name!r}{hint}")


class TransientToolError(ToolError):
    """A failure worth retrying."""


class EffectNotRecordedError(TransientToolError):
    """The effect ledger found ``idempotency_key`` claimed by another attempt but no receipt."""

    def __init__(self, idempotency_key: str) -> None:
        self.idempotency_key = idempotency_key
        super().__init__(
            f"effect {idempotency_key!r}: another attempt claimed it but committed no receipt; "
            "the step will be retried"
        )


class StoreWriteError(ToolError):
    """The effect ledger could not write ``idempotency_key``'s row (disk full, database
    locked, connection gone): an infrastructure fault, not the tool's. The effect did not
    count; the attempt runs again once the store recovers, and the tool's breaker ignores it.
    """

    def __init__(self, idempotency_key: str, cause: str) -> None:
        self.idempotency_key = idempotency_key
        super().__init__(
            f"effect {idempotency_key!r}: the effect ledger refused the write ({cause}); "
            "the attempt runs again once the store recovers (free disk space or release the "
            "lock on the database)"
        )


class LateEffectRefused(ToolError):  # noqa: N818 (what the late call meets, as it reads)
    """Attempt ``attempt`` of step ``step_id`` asked to apply effect ``idempotency_key``
    after its timeout passed: the ledger refused it, so the effect is left to the next
    attempt (core/effect_fence.py)."""

    def __init__(self, idempotency_key: str, step_id: str, attempt: int) -> None:
        self.idempotency_key = idempotency_key
        self.step_id = step_id
        self.attempt = attempt
        super().__init__(
            f"effect {idempotency_key!r} of step {step_id!r} refused: attempt {attempt} "
            "timed out before it was applied; the next attempt applies it"
        )


class PermanentToolError(ToolError):
    """A failure that retrying cannot fix."""


class ToolParamsError(PermanentToolError):
    """Params that do not fit tool ``tool_name``'s schema: permanent, since the same params
    fail the same schema on every attempt."""

    def __init__(self, tool_name: str, problem: str) -> None:
        self.tool_name = tool_name
        super().__init__(f"tool {tool_name!r}: params do not fit: {problem}")


class StepAttemptFailed(ToolError):  # noqa: N818 (the state Flower shows, as it reads)
    """Attempt ``attempt`` of step ``step_id`` (tool ``tool``) in session ``session_id`` did
    not complete: raised by the Celery task after its outcome and event are recorded, so
    Celery (and Flower) show the task as FAILURE. ``message`` is the outcome's masked error.

    Keyword fields with defaults: pickling (the prefork pool) rebuilds it from the message.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str = "",
        step_id: str = "",
        attempt: int = 0,
        tool: str = "",
        error_kind: str = "",
    ) -> None:
        self.session_id = session_id
        self.step_id = step_id
        self.attempt = attempt
        self.tool = tool
        self.error_kind = error_kind
        super().__init__(message)


class OutputTooLarge(PermanentToolError):  # noqa: N818 (the name users see)
    """Step ``step_id``'s ``what`` (its output, or one param) is ``size`` bytes of JSON, above
    ``limit``: permanent, since the same call makes the same value again."""

    def __init__(self, step_id: str, what: str, *, size: int, limit: int) -> None:
        self.step_id = step_id
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(
            f"step {step_id!r}: its {what} is {size:,} bytes of JSON, above the limit of "
            f"{limit:,} bytes; make the tool return less (store the data elsewhere and pass "
            "a link), or raise PLANLOOP_VALUE_MAX_BYTES"
        )


class AgentStepExhausted(PermanentToolError):  # noqa: N818 (reads as what happened)
    """Agent step ``step_id`` used its ``max_iterations`` turns without a final answer."""

    def __init__(self, step_id: str, max_iterations: int) -> None:
        self.step_id = step_id
        self.max_iterations = max_iterations
        super().__init__(
            f"agent step {step_id!r} gave no final answer within {max_iterations} turn(s); "
            "raise its params.max_iterations or narrow its instruction"
        )


class AgentStepStalled(PermanentToolError):  # noqa: N818 (reads as what happened)
    """Agent step ``step_id`` stopped making progress: ``rule`` fired after ``count`` turns in
    a row whose calls were ``call`` (the last one, as ``tool {params}``).

    ``rule`` is ``"repeated"`` (the same tool with the same params gave the same observation
    each time) or ``"refused"`` (each call was refused before it ran: a tool the step may not
    use, or params that do not fit). Permanent: the same loop would stall again.
    """

    def __init__(self, step_id: str, rule: str, count: int, call: str, detail: str = "") -> None:
        self.step_id = step_id
        self.rule = rule
        self.count = count
        self.call = call
        self.detail = detail
        if rule == "refused":
            what = f"{count} tool calls in a row were refused; the last: {call}"
        else:
            what = f"the same call gave the same observation {count} times in a row: {call}"
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"agent step {step_id!r} stalled ({rule}): {what}{why}. The loop stopped without "
            "asking the model again; give the step the tools it needs, narrow its "
            "instruction, or re-plan it as explicit steps"
        )


class ToolTimeoutError(ToolError):
    """The tool ran past ``timeout_s``."""

    def __init__(self, tool_name: str, timeout_s: float) -> None:
        self.tool_name = tool_name
        self.timeout_s = timeout_s
        super().__init__(f"tool {tool_name!r} ran past its timeout of {timeout_s:g}s")


public(
    ToolError,
    UnknownToolError,
    TransientToolError,
    EffectNotRecordedError,
    PermanentToolError,
    ToolParamsError,
    StepAttemptFailed,
    OutputTooLarge,
    AgentStepExhausted,
    AgentStepStalled,
    ToolTimeoutError,
    StoreWriteError,
    LateEffectRefused,
)
