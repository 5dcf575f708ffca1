"""The rule policy: which failed attempts are retried, and what happens when retries run out."""

from __future__ import annotations

import pytest

from planloop.core.models import ErrorKind
from planloop.planner.plan import Step
from planloop.supervisor.session.policy import RETRYABLE, RuleAction, backoff_s, decide_failure

PLAIN = Step(id="s", tool="bench.sleep")
CRITICAL = Step(id="s", tool="bench.sleep", critical=True)
WITH_FALLBACK = Step(id="s", tool="bench.sleep", fallback=[Step(id="alt", tool="bench.echo")])
CRITICAL_WITH_FALLBACK = Step(
    id="s", tool="bench.sleep", critical=True, fallback=[Step(id="alt", tool="bench.echo")]
)


@pytest.mark.parametrize(
    ("step", "attempt", "kind", "max_retries", "expected"),
    [
        # Retryable kinds are retried while the budget lasts: attempt N of 1 + max_retries.
        (PLAIN, 1, ErrorKind.TRANSIENT, 2, RuleAction.RETRY),
        (PLAIN, 2, ErrorKind.TRANSIENT, 2, RuleAction.RETRY),
        (PLAIN, 3, ErrorKind.TRANSIENT, 2, RuleAction.SKIP_BRANCH),
        (PLAIN, 1, ErrorKind.TIMEOUT, 1, RuleAction.RETRY),
        (PLAIN, 2, ErrorKind.TIMEOUT, 1, RuleAction.SKIP_BRANCH),
        (PLAIN, 1, ErrorKind.LOST, 1, RuleAction.RETRY),
        (CRITICAL, 1, ErrorKind.TRANSIENT, 1, RuleAction.RETRY),
        # No budget: the first failure is final.
        (PLAIN, 1, ErrorKind.TRANSIENT, 0, RuleAction.SKIP_BRANCH),
        (CRITICAL, 1, ErrorKind.TRANSIENT, 0, RuleAction.FAIL_SESSION),
        # Retrying cannot help these, whatever the budget.
        (PLAIN, 1, ErrorKind.PERMANENT, 5, RuleAction.SKIP_BRANCH),
        (CRITICAL, 1, ErrorKind.PERMANENT, 5, RuleAction.FAIL_SESSION),
        (PLAIN, 1, ErrorKind.UNAVAILABLE, 5, RuleAction.SKIP_BRANCH),
        (PLAIN, 1, "cancelled", 5, RuleAction.SKIP_BRANCH),
        (PLAIN, 1, "", 5, RuleAction.SKIP_BRANCH),
        # Out of retries: fallback first, then skip (non-critical) or fail (critical).
        (WITH_FALLBACK, 1, ErrorKind.PERMANENT, 2, RuleAction.FALLBACK),
        (WITH_FALLBACK, 3, ErrorKind.TRANSIENT, 2, RuleAction.FALLBACK),
        (WITH_FALLBACK, 1, ErrorKind.TRANSIENT, 2, RuleAction.RETRY),
        (CRITICAL_WITH_FALLBACK, 1, ErrorKind.PERMANENT, 2, RuleAction.FALLBACK),
        (CRITICAL, 3, ErrorKind.TIMEOUT, 2, RuleAction.FAIL_SESSION),
    ],
)
def test_decide_failure(
    step: Step, attempt: int, kind: str, max_retries: int, expected: RuleAction
) -> None:
    assert decide_failure(step, attempt, kind, max_retries) == expected


def test_retryable_kinds() -> None:
    assert {ErrorKind.TRANSIENT, ErrorKind.TIMEOUT, ErrorKind.LOST} == RETRYABLE
    assert ErrorKind.PERMANENT not in RETRYABLE


def test_error_kind_may_arrive_as_plain_text() -> None:
    """Kinds travel through Redis as strings; the policy must read them as such."""
    assert decide_failure(PLAIN, 1, "transient", 1) == RuleAction.RETRY
    assert decide_failure(PLAIN, 1, "timeout", 1) == RuleAction.RETRY
    assert decide_failure(CRITICAL, 1, "permanent", 1) == RuleAction.FAIL_SESSION


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "expected"),
    [
        (1, 0.2, 10.0, 0.2),
        (2, 0.2, 10.0, 0.4),
        (3, 0.2, 10.0, 0.8),
        (4, 0.2, 10.0, 1.6),
        (10, 0.2, 10.0, 10.0),  # capped
        (6, 0.5, 10.0, 10.0),  # 0.5 * 32 = 16 > cap
        (0, 0.2, 10.0, 0.2),  # no negative exponent
        (3, 0.0, 10.0, 0.0),  # no back-off configured
        (1, 1.0, 0.5, 0.5),  # the cap wins even on the first retry
    ],
)
def test_backoff_s(attempt: int, base: float, cap: float, expected: float) -> None:
    assert backoff_s(attempt, base, cap) == pytest.approx(expected)


def test_backoff_never_shrinks() -> None:
    delays = [backoff_s(a, 0.05, 3.0) for a in range(1, 20)]
    assert delays == sorted(delays)
    assert max(delays) == 3.0
