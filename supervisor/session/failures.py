"""How a failed attempt settles: retried after a back-off, or final and a context change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planloop.core.models import Event, EventType, Severity, StepStatus
from planloop.supervisor.session.policy import RuleAction, backoff_s, decide_failure
from planloop.supervisor.session.state import FINAL, SessionState


@dataclass(frozen=True)
class Settled:
    """What settling a failure changed: the step-hash fields to write, and (when final) the
    event the deliberation is told."""

    retry: bool
    fields: dict[str, Any]
    final: Event | None = None


def settle_failure(
    state: SessionState,
    step_id: str,
    *,
    max_retries: int,
    backoff_base_s: float,
    backoff_max_s: float,
    now: float,
) -> Settled:
    """Retry within the step's budget; past it the failure is final in this plan version."""
    step, st = state.steps[step_id], state.states[step_id]
    action = decide_failure(step, st.attempt, st.error_kind, max_retries)
    if action == RuleAction.RETRY:
        state.candidates.add(step_id)
        state.backing_off.add(step_id)
        st.status = StepStatus.READY
        st.not_before = now + backoff_s(st.attempt, backoff_base_s, backoff_max_s)
        return Settled(True, {"status": st.status, "not_before": st.not_before})
    st.note = FINAL
    if st.status == StepStatus.READY:
        st.status = StepStatus.FAILED
    kind = (
        EventType.TASK_INTERRUPTED if st.status == StepStatus.INTERRUPTED else EventType.TASK_FAILED
    )
    event = Event(
        type=kind,
        severity=Severity.CRITICAL if step.critical else Severity.WARNING,
        step_id=step_id,
        attempt=st.attempt,
        description=f"{step_id} ({step.tool}) failed for good after "
        f"{st.attempt} attempt(s): {st.error}",
        payload={"error_kind": st.error_kind, "tool": step.tool},
    )
    return Settled(False, {"status": st.status, "note": FINAL}, event)
