"""The rule policy: what to do with a step that failed, when no LLM decides.

Order (DESIGN.md): retry budget → fallback sub-graph → skip the branch if not critical → fail.
The session loop asks :func:`decide_failure` whether a failed attempt is retried; once a
failure is final, :func:`rule_verdict` is the decision of the no-LLM path and of the
decision agent's fallback when the LLM fails: one policy for both. A re-plan it decides on
takes the scope the scope rule (replan_scope.py) picks; without a model, the declared
fallback is the only new work either scope can bring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum

from planloop.core.models import RETRYABLE, ErrorKind, Event, EventType
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.plan import Step
from planloop.supervisor.session.replan_scope import ScopePick
from planloop.supervisor.session.verdict import Verdict

FAILURES = (EventType.TASK_FAILED, EventType.TASK_INTERRUPTED)
RULE = "rule policy (no LLM configured)"


class RuleAction(StrEnum):
    """What the rule policy chose for a failed attempt."""

    RETRY = "retry"  # schedule the next attempt after a back-off
    FALLBACK = "fallback"  # inject the step's declared fallback sub-graph
    SKIP_BRANCH = "skip_branch"  # mark it failed, skip its descendants, run the rest
    FAIL_SESSION = "fail_session"  # a critical step failed for good: the session fails


def decide_failure(
    step: Step,
    attempt: int,
    error_kind: str,
    max_retries: int,
    *,
    store_faults: int = 0,
    store_retry_limit: int = 0,
) -> RuleAction:
    """The rule policy's answer for ``step`` whose attempt ``attempt`` failed.

    A store fault (``store_faults`` of the step's attempts so far, this one included) is the
    infrastructure's, not the step's: it is retried up to ``store_retry_limit`` times and
    uses none of the step's ``max_retries``.
    """
    if error_kind == ErrorKind.STORE:
        if store_faults <= store_retry_limit:
            return RuleAction.RETRY
        return decide_final_failure(step)
    if error_kind in RETRYABLE and attempt - store_faults <= max_retries:
        return RuleAction.RETRY
    return decide_final_failure(step)


def decide_final_failure(step: Step) -> RuleAction:
    """The answer for ``step`` once its retries are spent (or cannot help)."""
    if step.fallback:
        return RuleAction.FALLBACK
    if not step.critical:
        return RuleAction.SKIP_BRANCH
    return RuleAction.FAIL_SESSION


def rule_verdict(
    changes: Sequence[Event],
    steps: Mapping[str, Step],
    scope: Callable[[str], ScopePick] | None = None,
) -> Verdict:
    """The rule policy's verdict on ``changes``: the first final failure with a fallback
    injects it, the first critical one fails the session; else continue, skipping what
    cannot run.

    Args:
        changes: The context changes decided on.
        steps: The current plan's steps by id.
        scope: The scope rule's pick for a failed step id; the re-plan that injects a
            fallback takes its action (REPLAN_REMAINING without it).
    """
    for event in changes:
        if event.type not in FAILURES or event.step_id not in steps:
            continue
        step = steps[event.step_id]
        action = decide_final_failure(step)
        if action == RuleAction.FALLBACK:
            text = f"{RULE}: {step.id} failed for good; inject its fallback"
            replan = ReplanAction.REPLAN_REMAINING
            if scope is not None:
                pick = scope(step.id)
                replan, text = pick.action, f"{text}; scope rule: {pick.reason}"
            decision = ReplanDecision(
                action=replan,
                reasoning=text,
                steps_to_cancel=[],
                confidence=1.0,
            )
            return Verdict(decision, "rule")
        if action == RuleAction.FAIL_SESSION:
            text = f"{RULE}: critical step {step.id} failed: {event.description}"
            decision = ReplanDecision(action=ReplanAction.ABORT, reasoning=text, confidence=1.0)
            return Verdict(decision, "rule", fail_session=True)
    kinds = ", ".join(sorted({e.type.value for e in changes}))
    text = f"{RULE}: continue; skip what cannot run ({kinds})"
    decision = ReplanDecision(action=ReplanAction.CONTINUE, reasoning=text, confidence=1.0)
    return Verdict(decision, "rule")


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Delay before the attempt after ``attempt``: exponential from ``base_s``, capped."""
    return float(min(cap_s, base_s * 2 ** max(0, attempt - 1)))
