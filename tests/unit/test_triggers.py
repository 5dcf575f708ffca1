"""The trigger policy: CRITICAL at once, WARNING in batches or when idle, milestones on demand."""

from __future__ import annotations

from planloop.core.models import Event, EventType, Severity
from planloop.supervisor.session.triggers import TriggerConfig, trigger_reason


def ev(kind: EventType, severity: Severity, step: str = "s", text: str = "x") -> Event:
    return Event(type=kind, severity=severity, step_id=step, description=text)


def warning(step: str) -> Event:
    return ev(EventType.TASK_UNEXPECTED_RESULT, Severity.WARNING, step)


def test_nothing_pending_never_triggers() -> None:
    assert trigger_reason([], TriggerConfig(), idle=True) is None


def test_a_critical_event_triggers_at_once_and_is_named() -> None:
    events = [warning("a"), ev(EventType.TASK_FAILED, Severity.CRITICAL, "b", "b broke")]
    assert trigger_reason(events, TriggerConfig(), idle=False) == "CRITICAL TASK_FAILED: b broke"


def test_warnings_wait_for_the_batch_size() -> None:
    cfg = TriggerConfig(batch_size=3)
    assert trigger_reason([warning("a")], cfg, idle=False) is None
    assert trigger_reason([warning("a"), warning("b")], cfg, idle=False) is None
    reason = trigger_reason([warning("a"), warning("b"), warning("c")], cfg, idle=False)
    assert reason == "3 WARNING events gathered (batch of 3)"


def test_warnings_trigger_early_when_nothing_else_can_run() -> None:
    reason = trigger_reason([warning("a")], TriggerConfig(batch_size=3), idle=True)
    assert reason == "1 WARNING event(s) and nothing else can run"


def test_info_events_never_trigger_even_when_idle() -> None:
    events = [ev(EventType.DEPENDENCY_BROKEN, Severity.INFO)] * 5
    assert trigger_reason(events, TriggerConfig(batch_size=1), idle=True) is None


def test_warnings_below_the_reaction_threshold_are_only_recorded() -> None:
    cfg = TriggerConfig(batch_size=1, react_severity=Severity.CRITICAL)
    assert trigger_reason([warning("a"), warning("b")], cfg, idle=True) is None
    critical = ev(EventType.NEW_CONSTRAINT, Severity.CRITICAL, "", "budget is 5k")
    assert trigger_reason([critical], cfg, idle=False) == "CRITICAL NEW_CONSTRAINT: budget is 5k"


def test_milestones_trigger_a_review_only_when_enabled() -> None:
    milestone = [ev(EventType.MILESTONE_REACHED, Severity.INFO, "", "phase 1 finished")]
    assert trigger_reason(milestone, TriggerConfig(milestones=False), idle=True) is None
    reason = trigger_reason(milestone, TriggerConfig(milestones=True), idle=False)
    assert reason == "milestone reached: proactive review"
