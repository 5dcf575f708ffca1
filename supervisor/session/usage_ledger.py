"""A session loop's side of the LLM meter (core/llm_meter.py): charge, count, reconcile.

Every call the loop's roles make (router, planner and its repairs, decider, re-planner,
critic, summarizer, compressor, reflector, embeddings) is charged by the client through the
loop's meter as its answer arrives; agent steps' calls are charged by their workers and
reported on their outcome events (``recorded``), so the loop only counts them. A takeover
reconciles the session hash's running totals with what the ledger recorded, so a call
whose loop crashed right after it is still counted.
"""

from __future__ import annotations

import logging

from planloop.config.settings import Settings
from planloop.core.llm_budget import Budget, UsageByModel, add_calls, reconcile
from planloop.core.llm_meter import CallLedger, UsageMeter
from planloop.core.llm_slot import session_slot
from planloop.planner.llm import Usage
from planloop.supervisor.session.state import SessionState

log = logging.getLogger(__name__)


def session_meter(state: SessionState, settings: Settings, ledger: CallLedger) -> UsageMeter:
    """The meter of one session loop; ``state.metered`` is set to it.

    Its check before each call counts what the loop knows (its totals and its own charges)
    reconciled with what the ledger recorded: an agent step whose worker died before its
    outcome event said what it spent has its calls in the ledger only.
    """

    def counted() -> UsageByModel:
        known = state.unmetered_usage()
        add_calls(known, meter.rows())
        try:
            recorded = ledger.usage_of(state.sid)
        except Exception as exc:  # the record rides out faults; the loop's count still holds
            log.warning("session=%s ledger not read for the budget check: %s", state.sid, exc)
            return known
        return reconcile(known, recorded)

    meter = UsageMeter(
        state.sid,
        ledger,
        # Read at each check: a session's options arrive with its load.
        budget=lambda: Budget.of(state.info.options, settings),
        prices=settings.llm_prices,
        counted=counted,
        includes_own=True,
        slot=session_slot(settings, state.sid),
    )
    state.metered = meter
    return meter


def count_reported(state: SessionState, usages: list[Usage]) -> None:
    """Count the calls an agent step's worker charged (``recorded``) in the loop's totals;
    the others the caller records (record_usage)."""
    add_calls(
        state.llm_usage,
        [
            {
                "model": u.model,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
            }
            for u in usages
            if u.recorded
        ],
    )


def reconcile_recorded(state: SessionState, recorded: dict[str, list[int]]) -> None:
    """On a takeover: the totals the hash restored, reconciled with the ledger's."""
    state.llm_usage = reconcile(state.llm_usage, recorded)
