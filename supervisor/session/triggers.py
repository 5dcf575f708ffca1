"""The trigger policy: decides *when* the session thinks, never *what*.

CRITICAL → at once; WARNING → once ``batch_size`` have gathered, or when nothing else can
run; MILESTONE_REACHED → a proactive review when enabled. Severities below the reaction
threshold are recorded and never trigger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planloop.core.models import Event, EventType, Severity


@dataclass(frozen=True)
class TriggerConfig:
    """Per-session trigger settings."""

    batch_size: int = 3
    react_severity: Severity = Severity.WARNING
    milestones: bool = False


def trigger_reason(pending: Sequence[Event], cfg: TriggerConfig, *, idle: bool) -> str | None:
    """Why the session should decide now about ``pending`` changes, or None to wait."""
    critical = [e for e in pending if e.severity == Severity.CRITICAL]
    if critical:
        return f"CRITICAL {critical[0].type.value}: {critical[0].description}"
    if cfg.milestones and any(e.type == EventType.MILESTONE_REACHED for e in pending):
        return "milestone reached: proactive review"
    warnings = [
        e
        for e in pending
        if e.severity == Severity.WARNING and e.severity.rank >= cfg.react_severity.rank
    ]
    if len(warnings) >= cfg.batch_size:
        return f"{len(warnings)} WARNING events gathered (batch of {cfg.batch_size})"
    if warnings and idle:
        return f"{len(warnings)} WARNING event(s) and nothing else can run"
    return None
