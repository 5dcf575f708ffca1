"""Undoing the writes of agent steps, from the effect ledger.

An agent step's tool calls go through the effect ledger under the key
``{sid}:{step}:react:{turn}`` (``workers/react.py``), and the ledger's SQL row names the tool
and keeps its receipt. A session that compensates (aborted, cancelled, failed) undoes each
recorded write of each agent step that ran, completed or not, with its tool's default
compensation fed from the receipt, merged with the plan steps' compensations newest first.
An agent step with an explicit ``compensate`` is undone by that instead, as a plan step is.

A plan step's write that committed after its attempt timed out (core/effect_fence.py: it
was already applying) has a row under the step's own key while the step never completed:
:func:`late_writes` finds those rows, and the ending undoes them like completed writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from planloop.core.tools import ToolRegistry
from planloop.planner.plan import Step


class EffectRecord(Protocol):
    """What the ledger's SQL row (:class:`core.record.EffectRow`) gives about one effect."""

    idempotency_key: str
    step_id: str
    tool: str
    receipt: str | None
    created_at: float


@dataclass(frozen=True)
class AgentEffect:
    """One write an agent step's loop made, as the ledger recorded it."""

    step_id: str
    turn: int
    tool: str
    receipt: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class Undo:
    """One compensation to run: of a plan step (``turn`` None), or of one agent-step write."""

    at: float  # when the effect was made: undone newest first
    step: Step
    tool: str
    params: dict[str, Any] = field(default_factory=dict)
    turn: int | None = None

    @property
    def suffix(self) -> str:
        """What tells this compensation's pseudo step apart from the step's own."""
        return "" if self.turn is None else f".react{self.turn}"

    @property
    def key(self) -> str:
        """The idempotency key of the effect it undoes, less the session id's prefix."""
        return self.step.id if self.turn is None else f"{self.step.id}:react:{self.turn}"


def agent_effects(sid: str, rows: Iterable[EffectRecord]) -> list[AgentEffect]:
    """The agent-step writes among the ledger's rows of session ``sid``, oldest first."""
    pattern = re.compile(rf"^{re.escape(sid)}:(?P<step>[^:]+):react:(?P<turn>\d+)$")
    found = []
    for row in rows:
        match = pattern.match(row.idempotency_key)
        if match is None or match["step"] != row.step_id or not row.receipt:
            continue
        receipt = json.loads(row.receipt)
        if isinstance(receipt, dict):
            found.append(
                AgentEffect(row.step_id, int(match["turn"]), row.tool, receipt, row.created_at)
            )
    return sorted(found, key=lambda e: e.created_at)


def effect_undos(
    tools: ToolRegistry, steps: Sequence[Step], effects: Iterable[AgentEffect]
) -> list[Undo]:
    """The compensations of the writes ``effects`` made for agent ``steps``: each write
    tool's default compensation, fed what it accepts from the receipt."""
    by_id = {s.id: s for s in steps}
    undos = []
    for effect in effects:
        step = by_id.get(effect.step_id)
        if step is None or effect.tool not in tools:
            continue
        spec = tools.get(effect.tool)
        if spec.side_effect != "write" or not spec.compensate or spec.compensate not in tools:
            continue
        accepted = set(tools.get(spec.compensate).param_names()) - {"simulate"}
        params = {k: v for k, v in effect.receipt.items() if k in accepted}
        undos.append(Undo(effect.created_at, step, spec.compensate, params, effect.turn))
    return undos


def late_writes(
    sid: str, rows: Iterable[EffectRecord], steps: Iterable[tuple[Step, str]]
) -> list[tuple[Step, AgentEffect]]:
    """The committed writes of ``steps`` (each with its current idempotency key) that
    never completed: late commits of timed-out attempts, with their receipts."""
    by_key = {key: step for step, key in steps}
    found = []
    for row in rows:
        step = by_key.get(row.idempotency_key)
        if step is None or row.step_id != step.id or not row.receipt:
            continue
        receipt = json.loads(row.receipt)
        if isinstance(receipt, dict):
            found.append((step, AgentEffect(step.id, 0, row.tool, receipt, row.created_at)))
    return found


LateWrites = Callable[[Sequence[tuple[Step, str]]], Awaitable[list[tuple[Step, AgentEffect]]]]
"""Where an ending finds the late writes of its steps (each with its idempotency key)."""


async def no_late_writes(steps: Sequence[tuple[Step, str]]) -> list[tuple[Step, AgentEffect]]:
    """The late-write source of an ending that has no ledger to read (unit tests)."""
    return []


async def no_agent_effects() -> list[AgentEffect]:
    """The effect source of an ending that has no ledger to read (unit tests)."""
    return []
