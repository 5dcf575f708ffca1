"""Every chat call metered against the session of the current context (core/llm_meter.py).

None starts once that session has spent its budget (:func:`metered`), and each answer's
usage is written to the session's ledger as soon as it is read (:func:`charged`), repairs
and unusable answers included.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

from openai.types.chat import ChatCompletion

from planloop.core.llm_meter import current_meter
from planloop.planner.llm import Role, Usage


def metered(role: Role) -> AbstractContextManager[object]:
    """Around one call: refuse to start it once the current session's budget is spent, and
    hold the session's call slot until it is charged (core/llm_meter.py).

    Raises:
        LLMBudgetSpentError: The meter of the current context says the budget is spent.
    """
    meter = current_meter()
    return nullcontext() if meter is None else meter.metered(str(role))


def charged(usage: Usage, kept: tuple[str | None, str | None] = (None, None)) -> Usage:
    """``usage``, charged to the current session's meter first when there is one, with the
    call's ``kept`` prompt and response (masked and cut: core/llm_transcript.py)."""
    meter = current_meter()
    if meter is None:
        return usage
    meter.charge(
        usage.role,
        usage.model,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.latency_s,
        prompt=kept[0],
        response=kept[1],
    )
    return replace(usage, recorded=True)


def usage_of(response: ChatCompletion, latency_s: float, model: str, role: Role) -> Usage:
    """The usage a whole (not streamed) completion reports; zero tokens when it reports none."""
    counted = response.usage
    return Usage(
        prompt_tokens=counted.prompt_tokens if counted else 0,
        completion_tokens=counted.completion_tokens if counted else 0,
        latency_s=latency_s,
        model=response.model or model,
        role=str(role),
    )


def sum_usages(usages: list[Usage]) -> Usage:
    """The usages of one answer's calls (repairs included) as one; recorded when all were."""
    last = usages[-1]
    return Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        latency_s=sum(u.latency_s for u in usages),
        model=last.model,
        role=last.role,
        recorded=all(u.recorded for u in usages),
    )
