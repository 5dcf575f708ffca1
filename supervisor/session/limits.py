"""The limits checked before a model call starts, in one place: the session's LLM budget and
its deadline.

They are checked before the decision agent is asked and again before a re-planner call (the
decision's own call may have spent the budget, or the time a re-plan needs). Past a limit no
call starts: a spent budget waits for a person or aborts, too little time left has the rule
policy decide.
"""

from __future__ import annotations

import time
from typing import Protocol

from planloop.config.settings import Settings
from planloop.core.models import Event
from planloop.planner.llm import ChatModel
from planloop.supervisor.session.deadline import short_of_time
from planloop.supervisor.session.state import SessionState
from planloop.supervisor.session.verdict import Verdict


class Limited(Protocol):
    """What the check reads of the deliberation (session/deliberate.py)."""

    state: SessionState
    settings: Settings
    chat: ChatModel | None

    def llm_budget_spent(self) -> str | None: ...

    def budget_verdict(self, spent: str) -> Verdict: ...

    def rules_for_time(self, changes: list[Event], note: str) -> Verdict: ...


def past_limits(
    deliberation: Limited,
    changes: list[Event],
    *,
    replanning: bool = False,
    budget: bool = True,
) -> Verdict | None:
    """The verdict to take instead of a model call about ``changes``, or None when the call
    may start. Before a decision a spent budget goes first; before a re-plan the deadline
    does (the decision just took the time). ``budget`` False: a person's decision, which
    the budget does not stop. Without an LLM there is no call, so no deadline to keep."""
    short = ""
    if deliberation.chat is not None:
        short = short_of_time(deliberation.state, deliberation.settings, time.time())
    if replanning and short:
        return deliberation.rules_for_time(changes, short)
    spent = deliberation.llm_budget_spent() if budget else None
    if spent is not None:
        return deliberation.budget_verdict(spent)
    if short:
        return deliberation.rules_for_time(changes, short)
    return None
