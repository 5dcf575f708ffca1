"""A write tool whose first call outlives its timeout, for the late-effect tests.

Loaded by ``PLANLOOP_TOOL_MODULES``, as a user's own tools are: the first call of each
label in the worker process sleeps ``first_sleep_s`` before it asks the ledger (the fence
refuses it), or ``first_apply_s`` inside the effect once the key is claimed (already
applying when the timeout passes: it commits late); every later call is quick.
``late.undo`` is its compensation. Both apply through the effect ledger, so the audit file
counts them.

A worker started with ``LATE_TOOLS_HOLD_UNDO`` (a file path) holds each ``late.undo`` inside
its effect, the key claimed and uncommitted: it creates the file, then sleeps until killed,
so a test can kill a worker halfway through a compensation.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from planloop.core.tools import ToolContext, tool

_CALLED: set[str] = set()  # labels called before in this process (the pool's threads share it)
HOLD_ENV = "LATE_TOOLS_HOLD_UNDO"
HOLD_S = 300.0  # longer than any test waits: the worker is killed first


class LateWriteParams(BaseModel):
    label: str = Field(min_length=1)
    first_sleep_s: float = 0.0
    first_apply_s: float = 0.0


class LateUndoParams(BaseModel):
    label: str = Field(min_length=1)


@tool(
    "late.write",
    description="Record a write; its first attempt may outlive its timeout.",
    params=LateWriteParams,
    side_effect="write",
    compensate="late.undo",
    timeout_s=1.0,
)
def late_write(params: LateWriteParams, ctx: ToolContext) -> dict[str, Any]:
    first = params.label not in _CALLED
    _CALLED.add(params.label)
    if first:
        time.sleep(params.first_sleep_s)

    def make_receipt() -> dict[str, Any]:
        if first:
            time.sleep(params.first_apply_s)
        return {"receipt_id": f"W-{ctx.idempotency_key}", "label": params.label}

    return ctx.effects.apply_once(ctx.idempotency_key, make_receipt, ctx)


@tool(
    "late.undo",
    description="Undo a late.write.",
    params=LateUndoParams,
    side_effect="write",
)
def late_undo(params: LateUndoParams, ctx: ToolContext) -> dict[str, Any]:
    hold = os.environ.get(HOLD_ENV, "")

    def make_receipt() -> dict[str, Any]:
        if hold:
            Path(hold).touch()
            time.sleep(HOLD_S)
        return {"undone": params.label, "key": ctx.idempotency_key}

    return ctx.effects.apply_once(ctx.idempotency_key, make_receipt, ctx)
