"""A session's LLM usage: the running totals kept in the session hash, and the budget.

After LLM calls the totals go to the session hash (a takeover goes on counting from them);
a budget the calls just spent is decided on like a spent re-plan budget (a forced ABORT, or a
wait for a person), once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from planloop.core.models import Event, EventType, Severity
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.verdict import Decision

CarryOut = Callable[[Decision], Awaitable[None]]


class LLMUsage:
    """What the session hash says of the session's LLM usage, and the budget's one notice."""

    def __init__(self, io: SessionIO, deliberation: Deliberation, carry_out: CarryOut) -> None:
        self.io = io
        self.deliberation = deliberation
        self.carry_out = carry_out
        self._written: dict[str, list[int]] = {}  # llm_usage as the hash has it
        self._budget_noted = False  # a spent LLM budget was decided on after a call

    def restore(self, usage: dict[str, list[int]]) -> None:
        """The totals the session hash had when the session was taken."""
        self.io.state.llm_usage = {model: list(tokens) for model, tokens in usage.items()}
        self._written = {model: list(tokens) for model, tokens in usage.items()}

    async def check(self) -> None:
        """Write the totals if they moved; decide on a budget they just spent."""
        state = self.io.state
        usage = state.fold_usage()
        if usage == self._written:
            return
        await self.io.write_session("llm_usage", usage)
        self._written = {model: list(tokens) for model, tokens in usage.items()}
        spent = self.deliberation.llm_budget_spent()
        if spent is None or state.outcome is not None or self._budget_noted:
            return
        self._budget_noted = True
        notice = Event(
            type=EventType.EXTERNAL_SIGNAL,
            severity=Severity.CRITICAL,
            description=spent,
            payload={"budget": "llm"},
        )
        await self.carry_out(Decision(self.deliberation.budget_verdict(spent), [notice], "budget"))
