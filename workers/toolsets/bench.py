"""Benchmark and test tools: sleep with scripted failures, echo, and an undoable write."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from planloop.core.errors import PermanentToolError, TransientToolError
from planloop.core.tools import ToolContext, simulate, tool
from planloop.core.values import encode
from planloop.workers.toolsets._data import ToolParams, receipt_id, undo_key


class SleepParams(ToolParams):
    """Params of ``bench.sleep``."""

    seconds: float = Field(0, ge=0, description="Seconds to sleep.")
    fail_attempts: list[int] = Field(
        default_factory=list,
        description="Attempt numbers (1-based) that fail with a transient error after sleeping.",
    )
    fail_with: Literal["transient", "permanent", "ValueError", "non_retryable"] = Field(
        "transient",
        description="What a listed attempt raises: TransientToolError, PermanentToolError, a "
        "plain ValueError (retried like any undeclared exception) or ScriptedNonRetryable "
        "(declared in bench.sleep's non_retryable).",
    )
    payload_bytes: int = Field(0, ge=0, description="Size of the returned payload string.")


class ScriptedNonRetryable(Exception):  # noqa: N818 (reads as what it is)
    """A plain exception ``bench.sleep`` lists in its ``non_retryable``: it fails the step
    at once, as a user's own tool declares the errors retrying cannot fix."""


_SCRIPTED_FAILURES: dict[str, type[Exception]] = {
    "transient": TransientToolError,
    "permanent": PermanentToolError,
    "ValueError": ValueError,
    "non_retryable": ScriptedNonRetryable,
}


class Slept(BaseModel):
    """What ``bench.sleep`` did."""

    slept: float = Field(description="Seconds slept.")
    attempt: int = Field(description="Attempt number that answered.")
    payload: str = Field(description="payload_bytes times 'x'.")


@tool(
    "bench.sleep",
    description="Sleep for some seconds, then answer (optionally with a payload of N bytes); "
    "fails on the listed attempt numbers (transiently unless fail_with says otherwise).",
    params=SleepParams,
    output=Slept,
    non_retryable=[ScriptedNonRetryable],
)
def sleep(params: SleepParams, ctx: ToolContext) -> Slept:
    """Sleep, then fail if this attempt is listed, else answer."""
    simulate(params.simulate, ctx)
    if params.seconds:
        # The sleep is the tool's work: benchmarks measure orchestration around it.
        time.sleep(params.seconds)
    if ctx.attempt in params.fail_attempts:
        raise _SCRIPTED_FAILURES[params.fail_with](
            f"bench.sleep: scripted failure on attempt {ctx.attempt} "
            f"(fail_attempts={params.fail_attempts})"
        )
    return Slept(slept=params.seconds, attempt=ctx.attempt, payload="x" * params.payload_bytes)


class EchoParams(ToolParams):
    """Params of ``bench.echo``."""

    value: Any = Field(description="Any JSON value; returned unchanged.")


class Echo(BaseModel):
    """The echoed value."""

    value: Any


@tool(
    "bench.echo",
    description="Return the given value unchanged (handy to test {{step.output.path}} references).",
    params=EchoParams,
    output=Echo,
)
def echo(params: EchoParams, ctx: ToolContext) -> Echo:
    """Return ``value``."""
    simulate(params.simulate, ctx)
    return Echo(value=params.value)


class DigestParams(ToolParams):
    """Params of ``bench.digest``."""

    value: Any = Field(description="Any JSON value.")


class Digest(BaseModel):
    """The content address and size of a value."""

    sha256: str = Field(description="sha256 of the value's stored JSON (core/values.py).")
    bytes: int = Field(description="Length of that JSON.")


@tool(
    "bench.digest",
    description="Return the sha256 and size of the given value's JSON (checks that a big "
    "value arrived unchanged without storing it again).",
    params=DigestParams,
    output=Digest,
)
def digest(params: DigestParams, ctx: ToolContext) -> Digest:
    """Hash ``value`` as the store encodes it."""
    simulate(params.simulate, ctx)
    text = encode(params.value)
    return Digest(sha256=hashlib.sha256(text.encode()).hexdigest(), bytes=len(text))


class WriteParams(ToolParams):
    """Params of ``bench.write``."""

    label: str = Field(min_length=1, description="What the write is about.")
    seconds: float = Field(0, ge=0, description="Seconds the write takes.")


class WriteReceipt(BaseModel):
    """Receipt of a ``bench.write``."""

    receipt_id: str
    label: str
    idempotency_key: str


@tool(
    "bench.write",
    description="A write with a receipt, recorded once per idempotency key (undone by "
    "bench.undo_write).",
    params=WriteParams,
    output=WriteReceipt,
    side_effect="write",
    compensate="bench.undo_write",
)
def write(params: WriteParams, ctx: ToolContext) -> WriteReceipt:
    """Record the write once per idempotency key."""
    simulate(params.simulate, ctx)
    if params.seconds:
        time.sleep(params.seconds)

    def make_receipt() -> dict[str, Any]:
        return WriteReceipt(
            receipt_id=receipt_id("W", ctx.idempotency_key),
            label=params.label,
            idempotency_key=ctx.idempotency_key,
        ).model_dump(mode="json")

    return WriteReceipt.model_validate(
        ctx.effects.apply_once(ctx.idempotency_key, make_receipt, ctx)
    )


class UndoWriteParams(ToolParams):
    """Params of ``bench.undo_write``."""

    label: str = Field(min_length=1, description="Label of the write to undo.")
    seconds: float = Field(0, ge=0, description="Ignored: a bench.write's own params undo it.")


class UndoReceipt(BaseModel):
    """Receipt of a ``bench.undo_write``."""

    undone: bool
    label: str
    idempotency_key: str


@tool(
    "bench.undo_write",
    description="Undo a bench.write (write; recorded once per idempotency key).",
    params=UndoWriteParams,
    output=UndoReceipt,
    side_effect="write",
)
def undo_write(params: UndoWriteParams, ctx: ToolContext) -> UndoReceipt:
    """Record the undo once, under the key ``{idempotency_key}:undo``."""
    simulate(params.simulate, ctx)
    key = undo_key(ctx)

    def make_receipt() -> dict[str, Any]:
        return UndoReceipt(undone=True, label=params.label, idempotency_key=key).model_dump(
            mode="json"
        )

    return UndoReceipt.model_validate(ctx.effects.apply_once(key, make_receipt, ctx))
