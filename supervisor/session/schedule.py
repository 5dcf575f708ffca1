"""The scheduler: given a session's state, which steps to dispatch now (when to look again:
session/waiting.py).

Pure functions of :class:`SessionState` (its candidate index is pruned on the way, which is
bookkeeping, not a decision): the loop sends what they return.
"""

from __future__ import annotations

from collections.abc import Container
from contextlib import closing

from planloop.core.models import StepStatus
from planloop.supervisor.session.state import OPEN, SessionState


def ready_steps(
    state: SessionState, now: float, concurrency: int, skip: Container[str] = ()
) -> list[str]:
    """Steps to dispatch now (first attempts, and retries whose back-off ended), in plan
    order, within ``concurrency`` attempts in flight; ``skip``: steps held back (waiting
    for a worker that serves their tool), which take no slot.

    A step waiting for a person's approval is noted in ``state.awaiting_approval`` (the loop
    announces it once) and not returned.
    """
    slots = concurrency - state.running()
    ready: list[str] = []
    if slots <= 0:
        return ready
    with closing(state.candidates.scan()) as candidates:
        for step_id in candidates:
            st = state.states.get(step_id)
            if st is None or st.status not in OPEN:
                state.candidates.discard(step_id)
                continue
            step = state.steps[step_id]
            if any(
                state.states[d].status != StepStatus.COMPLETED
                for d in step.dependencies
                if d in state.states
            ):
                state.candidates.discard(step_id)  # re-added when its last dependency ends
                continue
            if step.requires_approval and step_id not in state.approved:
                state.awaiting_approval.add(step_id)
                continue
            if st.not_before <= now and step_id not in skip:
                ready.append(step_id)
                if len(ready) >= slots:
                    break
    return ready
