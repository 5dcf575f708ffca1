"""The loop the planning agents share: ask until an answer is a valid plan, or give up.

The chat client repairs answers that are not JSON or do not fit the schema; this loop sends
back an answer that breaks a plan rule (cycle, unknown tool, bad params, bad reference,
redefined completed step) with the exact validation error, at most ``max_repairs`` times.
An answer that repeats a proposal that already failed (same fingerprint) is sent back once
with that fact, then refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from planloop.core.errors import PlanValidationError, RepeatedPlanError
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.plan import Plan, Step

logger = logging.getLogger(__name__)

A = TypeVar("A", bound=BaseModel)
R = TypeVar("R")


@dataclass(frozen=True)
class Proposal(Generic[R]):
    """One answer as the loop judges it.

    Attributes:
        outcome: What the caller gets when the answer is accepted, or why it is not.
        fingerprints: What the proposal is known by, to refuse one that already failed.
    """

    outcome: R | PlanValidationError
    fingerprints: tuple[str, ...] = ()


def judged(build: Callable[[], R]) -> Proposal[R]:
    """``build()`` as a proposal with no fingerprint: its result, or the plan error it raised."""
    try:
        return Proposal(guarded(build))
    except PlanValidationError as exc:
        return Proposal(exc)


def merged_proposal(
    steps: Sequence[Step], merge: Callable[[], Plan], check: Callable[[Plan], None]
) -> Proposal[Plan]:
    """A re-plan's ``steps`` merged into the plan in force, once: the merged plan if
    ``check`` accepts it, known by the fingerprints of the steps and of the merged plan."""
    prints: list[str] = []
    try:
        prints.append(guarded(lambda: Plan(steps=list(steps)).fingerprint()))
        merged = guarded(merge)
        prints.append(merged.fingerprint())
        guarded(lambda: check(merged))
    except PlanValidationError as exc:
        return Proposal(exc, tuple(prints))
    return Proposal(merged, tuple(prints))


def ask_until_accepted(
    chat: ChatModel,
    role: Role,
    messages: list[dict[str, str]],
    schema: type[A],
    judge: Callable[[A], Proposal[R]],
    *,
    max_repairs: int,
    failed: Collection[str] = (),
) -> tuple[R, list[Usage]]:
    """Ask until ``judge`` accepts an answer; send each rejection back with its reason.

    Returns:
        The accepted proposal's outcome and the usage of every call.

    Raises:
        PlanValidationError: still invalid after ``max_repairs`` repairs.
        RepeatedPlanError: a proposal whose fingerprint is in ``failed``, twice.
        LLMError: the endpoint failed or kept answering unusable JSON.
    """
    asked = list(messages)
    usages: list[Usage] = []
    repairs = repeats = 0
    while True:
        answer, usage = chat.complete_json(role, asked, schema)
        usages.append(usage)
        proposal = judge(answer)
        repeated = next((fp for fp in proposal.fingerprints if fp in failed), None)
        if repeated is not None:
            repeats += 1
            if repeats > 1:
                raise RepeatedPlanError(
                    f"the {role} proposed a plan that already failed twice "
                    f"(fingerprint {repeated[:12]}); counted as a failed re-plan",
                    fingerprint=repeated,
                )
            problem = (
                f"this plan repeats a plan that already failed (fingerprint "
                f"{repeated[:12]}). Propose a different approach: other tools, other "
                "params or another structure."
            )
        elif isinstance(proposal.outcome, PlanValidationError):
            exc = proposal.outcome
            repairs += 1
            if repairs > max_repairs:
                raise PlanValidationError(
                    f"the {role}'s plan is still invalid after {max_repairs} repair(s): {exc}",
                    step_id=exc.step_id,
                ) from exc
            problem = f"the plan is invalid: {exc}"
        else:
            return proposal.outcome, usages
        logger.info("%s answer refused: %s", role, problem)
        asked += [
            {"role": "assistant", "content": answer.model_dump_json(exclude_defaults=True)},
            {
                "role": "user",
                "content": f"Your answer cannot be used: {problem}\n"
                "Reply with the corrected JSON only: no prose, no code fences.",
            },
        ]


def guarded(build: Callable[[], R]) -> R:
    """``build()``; a plan it builds that pydantic refuses (say, a merged plan past a
    limit) is a plan error like the others: sent back for repair, never a crash."""
    try:
        return build()
    except ValidationError as invalid:
        raise PlanValidationError(_first_error(invalid)) from invalid


def _first_error(invalid: ValidationError) -> str:
    """The first problem pydantic found in a plan built from an answer, for the model."""
    first = invalid.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"the resulting plan is invalid{' at ' + where if where else ''}: {first['msg']}"
