"""The settings of Redis faults, effects, poison sessions and input limits.

One group of fields of :class:`planloop.config.settings.Settings`, the one class that reads
them from the environment.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

# Input limits no setting may exceed (core/input_limits.py explains why).
MAX_NESTING_DEPTH_CEILING = 128


class SafetySettings(BaseModel):
    """The ``PLANLOOP_*`` fields of Redis faults, effects, poison sessions and input limits."""

    # --- Redis faults (processes ride out Redis faults) ----------------------------------
    worker_redis_retry_s: float = Field(
        60.0,
        ge=0,
        description="Seconds a worker keeps retrying a Redis call (claiming an attempt, "
        "recording its outcome) while Redis is unreachable, default 60; past it the "
        "outcome is dropped and the supervisor's watchdog runs the attempt again after "
        "its timeout + grace.",
    )

    # --- Effects (effects survive a Redis loss) -------------------------------------------
    effect_audit_path: str | None = Field(
        None,
        description="Test and benchmark aid: a file that gets one JSON line per real "
        "application of a bundled write tool's effect (duplicates = keys seen twice); "
        "unset (the default) writes nothing.",
    )

    # --- Poison sessions (a session whose loop keeps crashing ends) -----------------------
    max_session_crashes: int = Field(
        5,
        ge=1,
        description="Crashes of one session's loop (counted across supervisors) after which "
        "it ends failed, its completed writes compensated. Default 5.",
    )
    session_crash_cool_off_s: float = Field(
        2.0,
        gt=0,
        description="Seconds the first crash of a session's loop waits before it is retried; "
        "doubles with each crash. Default 2.",
    )
    session_crash_cool_off_max_s: float = Field(
        60.0, gt=0, description="Longest wait between two crashes of one session, seconds."
    )

    # --- Input limits (hostile or careless input) -----------------------------------------
    max_input_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1,
        description="Largest plan file, goal, constraint or signal text accepted, bytes "
        "(default 8 MiB).",
    )
    max_nesting_depth: int = Field(
        64,
        ge=1,
        le=MAX_NESTING_DEPTH_CEILING,
        description="Deepest nesting of a step's params or an expectation value, levels "
        "(default 64, at most 128).",
    )
    max_yaml_alias_nodes: int = Field(
        10_000,
        ge=0,
        description="Nodes that YAML aliases may add to a plan file by expansion "
        "(default 10,000; stops alias bombs).",
    )
    max_plan_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="Largest plan accepted as stored (compact JSON, aliases expanded), bytes, "
        "from a file, the SDK or the supervisor's own reading (default 16 MiB).",
    )
