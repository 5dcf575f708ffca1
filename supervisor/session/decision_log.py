"""Decisions and LLM calls put into a session's next checkpoint (the SQL record), counted."""

from __future__ import annotations

import logging
import time

from planloop.core.metrics import count_decision, count_llm_call
from planloop.core.record import Checkpoint
from planloop.core.tracing import llm_span
from planloop.planner.llm import Usage
from planloop.supervisor.session.verdict import Decision

log = logging.getLogger(__name__)


def record_decision(batch: Checkpoint, sid: str, decision: Decision) -> None:
    """Put a decision (and the LLM calls behind it) into the session's next checkpoint."""
    verdict, d = decision.verdict, decision.verdict.choice
    batch.decisions.append(
        {
            "created_at": time.time(),
            "action": d.action.value,
            "source": verdict.source,
            "reasoning": d.reasoning,
            "payload": d.model_dump_json(),
            "prompt_tokens": sum(u.prompt_tokens for u in verdict.usages),
            "completion_tokens": sum(u.completion_tokens for u in verdict.usages),
        }
    )
    record_usage(batch, verdict.usages)
    count_decision(d.action.value, verdict.source)
    log.info(
        "session=%s decision %s (%s) on %s: %s",
        sid,
        d.action.value,
        verdict.source,
        decision.reason,
        d.reasoning,
    )


def record_usage(batch: Checkpoint, usages: list[Usage]) -> None:
    """Put LLM calls into the session's next checkpoint, except those the meter wrote to
    the ledger as they arrived (``recorded``: counted by the loop already)."""
    for u in usages:
        count_llm_call(str(u.role), u.model, u.prompt_tokens, u.completion_tokens)
        llm_span(str(u.role), u.model, u.prompt_tokens, u.completion_tokens, u.latency_s)
        if u.recorded:
            continue
        batch.llm_calls.append(
            {
                "created_at": time.time(),
                "role": str(u.role),
                "model": u.model,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "latency_s": u.latency_s,
            }
        )
