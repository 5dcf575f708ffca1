"""A session's LLM budgets: tokens and US dollars spent by every call of every role.

Spend is kept as tokens per model (``{model: [prompt, completion]}``, in the session hash as
``llm_usage``) and priced when read, so a corrected price table applies to sessions already
running. Spending a budget is treated like a spent re-plan budget (thinking.py): no LLM call
starts once it is spent, and the session is aborted, or waits for a person when
``approval_on_budget`` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planloop.config.settings import ModelPrice, Settings
from planloop.core.models import SessionOptions

log = logging.getLogger(__name__)

# Models already warned about as missing from the price table: once per process is enough.
_UNPRICED: set[str] = set()

UsageByModel = dict[str, list[int]]  # model -> [prompt tokens, completion tokens]


@dataclass(frozen=True)
class Spend:
    """What a session's LLM calls cost so far."""

    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Budget:
    """A session's LLM budgets; ``None`` is unlimited."""

    max_tokens: int | None
    max_cost_usd: float | None

    @classmethod
    def of(cls, options: SessionOptions, settings: Settings) -> Budget:
        """The session's options, else the settings' defaults."""
        return cls(
            max_tokens=options.max_tokens or settings.session_max_tokens,
            max_cost_usd=options.max_cost_usd or settings.session_max_cost_usd,
        )

    @property
    def limited(self) -> bool:
        """Whether there is any budget to keep."""
        return self.max_tokens is not None or self.max_cost_usd is not None

    def spent(self, spend: Spend) -> str | None:
        """Which budget ``spend`` has used up, in words a user can act on; None if none."""
        if self.max_tokens is not None and spend.tokens >= self.max_tokens:
            return f"token budget spent ({spend.tokens} of {self.max_tokens} tokens)"
        if self.max_cost_usd is not None and spend.cost_usd >= self.max_cost_usd:
            return f"cost budget spent (${spend.cost_usd:.6f} of ${self.max_cost_usd:g})"
        return None


def add_calls(usage: UsageByModel, calls: Iterable[Mapping[str, Any]]) -> None:
    """Add ``calls`` (llm_calls rows: model, prompt_tokens, completion_tokens) to ``usage``."""
    for call in calls:
        totals = usage.setdefault(str(call["model"]), [0, 0])
        totals[0] += int(call["prompt_tokens"])
        totals[1] += int(call["completion_tokens"])


def reconcile(*counts: Mapping[str, list[int]]) -> UsageByModel:
    """The larger count of each model's prompt and completion tokens among ``counts``.

    Two views of one session's spend (the running totals of the session hash, the calls the
    ledger recorded) each miss only what the other has not seen yet; neither counts a call
    twice. Taking the larger of each is what both have seen, so a takeover or a worker's
    check never counts less than was spent and never counts a call twice.
    """
    merged: UsageByModel = {}
    for count in counts:
        for model, (prompt, completion) in count.items():
            totals = merged.setdefault(model, [0, 0])
            totals[0], totals[1] = max(totals[0], prompt), max(totals[1], completion)
    return merged


def cost_usd(
    model: str, prompt_tokens: int, completion_tokens: int, prices: Mapping[str, ModelPrice]
) -> float:
    """What one model's tokens cost; a model missing from ``prices`` costs 0 (warned once)."""
    price = prices.get(model)
    if price is None:
        if model not in _UNPRICED:
            _UNPRICED.add(model)
            log.warning(
                "model %r has no price in PLANLOOP_LLM_PRICES: its calls count as $0 "
                "against cost budgets (tokens still count)",
                model,
            )
        return 0.0
    return (prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1e6


def spend_of(usage: Mapping[str, list[int]], prices: Mapping[str, ModelPrice]) -> Spend:
    """Tokens and cost of ``usage``."""
    return Spend(
        tokens=sum(p + c for p, c in usage.values()),
        cost_usd=sum(cost_usd(m, p, c, prices) for m, (p, c) in usage.items()),
    )


def budget_view(
    usage: Mapping[str, list[int]], options: SessionOptions, settings: Settings
) -> dict[str, Any]:
    """Spend against budget for ``watch`` and ``show``."""
    spend, budget = spend_of(usage, settings.llm_prices), Budget.of(options, settings)
    return {
        "tokens": spend.tokens,
        "max_tokens": budget.max_tokens,
        "cost_usd": round(spend.cost_usd, 6),
        "max_cost_usd": budget.max_cost_usd,
    }


def budget_line(view: Mapping[str, Any]) -> str:
    """``tokens 1200/5000  cost $0.0012/$0.50`` (no limit shown as ``-``)."""
    max_tokens, max_cost = view.get("max_tokens"), view.get("max_cost_usd")
    tokens = f"tokens {view['tokens']}/{max_tokens if max_tokens is not None else '-'}"
    limit = f"${max_cost:g}" if max_cost is not None else "-"
    return f"{tokens}  cost ${view['cost_usd']:.4f}/{limit}"
