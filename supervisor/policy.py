"""The rule policy: what to do with a step that failed, when no LLM decides.

Order (DESIGN.md): retry budget → fallback sub-graph → skip the branch if not critical → fail.
"""

from __future__ import annotations

from enum import StrEnum

from core.models import ErrorKind
from planner.plan import Step

RETRYABLE = frozenset({ErrorKind.TRANSIENT, ErrorKind.TIMEOUT, ErrorKind.LOST})


class RuleAction(StrEnum):
    """What the rule policy chose for a failed attempt."""

    RETRY = "retry"  # schedule the next attempt after a back-off
    FALLBACK = "fallback"  # inject the step's declared fallback sub-graph
    SKIP_BRANCH = "skip_branch"  # mark it failed, skip its descendants, run the rest
    FAIL_SESSION = "fail_session"  # a critical step failed for good: the session fails


def decide_failure(step: Step, attempt: int, error_kind: str, max_retries: int) -> RuleAction:
    """The rule policy's answer for ``step`` whose attempt ``attempt`` failed."""
    if error_kind in RETRYABLE and attempt <= max_retries:
        return RuleAction.RETRY
    if step.fallback:
        return RuleAction.FALLBACK
    if not step.critical:
        return RuleAction.SKIP_BRANCH
    return RuleAction.FAIL_SESSION


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Delay before the attempt after ``attempt``: exponential from ``base_s``, capped."""
    return float(min(cap_s, base_s * 2 ** max(0, attempt - 1)))
