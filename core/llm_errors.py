"""Errors of the model endpoint: :class:`LLMError` and its subclasses (the tree:
core/errors.py)."""

from __future__ import annotations

from planloop.core.error_base import PlanloopError, public


class LLMError(PlanloopError):
    """The model endpoint failed, or answered something we could not use."""


class LLMUnavailableError(LLMError):
    """The endpoint at ``base_url`` could not be reached, refused us, or kept failing.

    ``status`` is the last HTTP status, or ``None`` when no answer came back at all.
    """

    def __init__(self, message: str, *, base_url: str, status: int | None = None) -> None:
        self.base_url = base_url
        self.status = status
        super().__init__(message)


class LLMResponseError(LLMError):
    """The model answered for ``role`` with text that is not the JSON we asked for.

    ``raw`` holds the model's last answer verbatim, for the session record and debugging.
    """

    def __init__(self, message: str, *, raw: str, role: str | None = None) -> None:
        self.raw = raw
        self.role = role
        super().__init__(message)


class LLMBudgetSpentError(LLMError):
    """No call for ``role`` was started: session ``session_id`` has spent its LLM budget.

    The message says which budget and how much of it (``token budget spent (5100 of 5000
    tokens)``); raise ``--max-tokens`` / ``--max-cost-usd`` to give the session more.
    """

    def __init__(self, spent: str, *, session_id: str, role: str) -> None:
        self.spent = spent
        self.session_id = session_id
        self.role = role
        super().__init__(f"{spent}: no {role} call is started (session {session_id})")


public(LLMError, LLMUnavailableError, LLMResponseError, LLMBudgetSpentError)
