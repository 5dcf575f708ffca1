"""How a failed attempt settles: retried after a back-off, or final and a context change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planloop.core.models import ErrorKind, Event, EventType, Severity, StepStatus
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
    store_retry_interval_s: float = 0.0,
    store_retry_limit: int = 0,
) -> Settled:
    """Retry within the step's budget; past it the failure is final in this plan version.

    An attempt the store failed (``STORE``) runs again after ``store_retry_interval_s``, up
    to ``store_retry_limit`` times, outside the step's budget.
    """
    step, st = state.steps[step_id], state.states[step_id]
    store_fault = st.error_kind == ErrorKind.STORE
    if store_fault:
        st.store_faults += 1
    action = decide_failure(
        step,
        st.attempt,
        st.error_kind,
        max_retries,
        store_faults=st.store_faults,
        store_retry_limit=store_retry_limit,
    )
    if action == RuleAction.RETRY:
        state.candidates.add(step_id)
        state.backing_off.add(step_id)
        st.status = StepStatus.READY
        if store_fault:
            st.not_before = now + store_retry_interval_s
        else:
            st.not_before = now + backoff_s(
                st.attempt - st.store_faults, backoff_base_s, backoff_max_s
            )
        fields: dict[str, Any] = {"status": st.status, "not_before": st.not_before}
        if store_fault:
            fields["store_faults"] = st.store_faults
        return Settled(True, fields)
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
