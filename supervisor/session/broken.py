"""DEPENDENCY_BROKEN as a trigger: a final failure that leaves critical work unable
to run is put to the decision agent at once, before any branch is skipped."""

from __future__ import annotations

from planloop.core.models import Event, EventType, Severity
from planloop.planner.dag import descendants
from planloop.supervisor.session.state import SessionState, has_ended


def dependency_broken(state: SessionState, step_id: str, *, unresolved: bool) -> Event | None:
    """The CRITICAL event the final failure of ``step_id`` raises, or None.

    Raised when a critical step downstream has not ended (it cannot run now), or when the
    step failed because a reference in its params cannot resolve (a dependency's output
    lacks what the plan expected; a re-plan can fix that, a retry cannot).
    """
    critical = sorted(
        d
        for d in descendants(state.plan, step_id)
        if state.steps[d].critical and not has_ended(state.states[d])
    )
    if not critical and not unresolved:
        return None
    error = state.states[step_id].error
    if unresolved:
        text = f"a reference in {step_id}'s params cannot resolve: {error}"
    else:
        text = f"{step_id} failed for good: {error}"
    if critical:
        text += f"; critical step(s) {', '.join(critical)} cannot run"
    return Event(
        type=EventType.DEPENDENCY_BROKEN,
        severity=Severity.CRITICAL,
        step_id=step_id,
        attempt=state.states[step_id].attempt,
        description=text,
        payload={"critical": critical, "unresolved": unresolved},
    )
