"""The settings of sessions, the supervisor that drives them and circuit breakers.

One group of fields of :class:`planloop.config.settings.Settings`, the one class that reads
them from the environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SessionSettings(BaseModel):
    """The ``PLANLOOP_*`` fields of sessions, their supervisor and circuit breakers."""

    # --- Sessions and the supervisor -----------------------------------------------------
    session_concurrency: int = Field(8, ge=1, description="Steps of one session running at once.")
    max_replans: int = Field(3, ge=0, description="Re-plans per session before a forced ABORT.")
    max_rounds: int = Field(
        3, ge=1, description="Rounds with critique per LLM session (the first plan is round 1)."
    )
    context_max_chars: int = Field(
        12_000,
        ge=1_000,
        description="Characters of step results the critic and the summarizer read as they "
        "are (default 12,000); past it the compressor role condenses them in chunks of this "
        "size, or without a model the rule-based ladder shortens every output, and every "
        "step stays named with its status.",
    )
    batch_react_size: int = Field(3, ge=1, description="WARNING events that trigger a decision.")
    react_severity: Literal["INFO", "WARNING", "CRITICAL"] = Field(
        "WARNING", description="Lowest event severity the trigger policy reacts to."
    )
    lease_ttl_s: float = Field(1.5, gt=0, description="Session-shard lease time-to-live, seconds.")
    session_shards: int = Field(
        64,
        ge=1,
        description="Session shards: each session belongs to one (CRC32 of its id), and a "
        "supervisor owns sessions by leasing whole shards, so lease traffic is per shard, not "
        "per session. Every process of a deployment must use the same number; change it only "
        "with every supervisor stopped.",
    )
    reclaim_interval_s: float = Field(
        0.25, gt=0, description="How often a supervisor looks for sessions without an owner."
    )
    event_batch: int = Field(256, ge=1, description="Events read and checkpointed per batch.")
    admission_slots: int = Field(
        200,
        ge=1,
        description="Sessions a supervisor starts at once (load, claim, first dispatch); "
        "the others wait, first come, first served (supervisor/process/admission.py).",
    )
    admission_max_defer_s: float = Field(
        2.0,
        ge=0,
        description="Longest a running session's bookkeeping (or a checkpoint commit) waits, "
        "per turn, for sessions that are starting; also the longest stretch a burst of submits "
        "is read as one before the running sessions get a turn (supervisor/process/admission.py).",
    )
    checkpoint_linger_s: float = Field(
        0.02,
        ge=0,
        description="Quiet seconds the background SQL writer waits for before a commit "
        "(group commit, at most 0.25 s): keeps SQL work out of a burst of dispatches.",
    )
    stream_keep: int = Field(
        10_000,
        ge=10,
        description="Events kept in a session's stream; older ones (acknowledged and in SQL) "
        "are trimmed, never one still pending.",
    )
    max_deliveries: int = Field(
        5, ge=1, description="Deliveries of one event before it goes to the dead-letter stream."
    )

    milestone_reviews: bool = Field(
        False, description="Review the plan proactively when a declared phase finishes."
    )
    approval_on_budget: bool = Field(
        False,
        description="When the re-plan budget is spent and a trigger needs a plan change, "
        "wait for `planloop approve` instead of aborting (notes and changes the rules go on "
        "with never wait); default false.",
    )
    session_max_tokens: int | None = Field(
        None,
        ge=1,
        description="LLM tokens (prompt + completion, every role) a session may spend before "
        "it is treated like a spent re-plan budget; unlimited when unset.",
    )
    session_max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="LLM cost in US dollars (priced by llm_prices) a session may spend before "
        "it is treated like a spent re-plan budget; unlimited when unset.",
    )
    session_deadline_s: float | None = Field(
        None, gt=0, description="Seconds a session may run before it ends with what it has."
    )

    # --- Circuit breakers -----------------------------------------------------------------
    breaker_failures: int = Field(
        5, ge=1, description="Failures of one tool within the window that open its breaker."
    )
    breaker_window_s: float = Field(30.0, gt=0, description="Failure counting window, seconds.")
    breaker_cooldown_s: float = Field(
        10.0, gt=0, description="Seconds an open breaker waits before a half-open probe."
    )
