"""The waiting decision: until when a session waits for events before it looks again.

A session with nothing to do until an event (an approval, a signal, a step's outcome, a
command) parks: it waits on its mailbox with no time at all, and costs nothing until the
event hub hands it something. Only what the loop must do at a time sets one (the event hub
then wakes it through the supervisor's one timer heap, supervisor/io/wake_timers.py):

- a retry's back-off ends (the step is dispatched then);
- the session's deadline passes (it ends failed then);
- attempts are in flight, or ready steps wait for a worker that serves their tool: the
  watchdog and the no-consumer watch look at them every ``POLL_S``.
"""

from __future__ import annotations

from planloop.core.models import StepStatus
from planloop.supervisor.session.state import SessionState

POLL_S = 1.0  # how often a session with attempts in flight (or held back) looks again
DEADLINE_SLACK_S = 0.01  # the end checks "past the deadline": wake just after it


def wake_at(
    state: SessionState, now: float, *, default_deadline_s: float | None, polling: bool
) -> float | None:
    """The wall-clock time the session must look again without an event; None: it parks
    until one arrives. ``polling``: something of the turn looks at a clock (see above)."""
    times: list[float] = []
    if polling or state.running():
        times.append(now + POLL_S)
    for step_id in list(state.backing_off):
        st = state.states.get(step_id)
        if st is None or st.status != StepStatus.READY or st.not_before <= now:
            state.backing_off.discard(step_id)  # bookkeeping: the back-off is over
        else:
            times.append(st.not_before)
    deadline = state.info.options.deadline_s or default_deadline_s
    if deadline and state.info.started_at:
        times.append(state.info.started_at + deadline + DEADLINE_SLACK_S)
    return min(times, default=None)


def wait_ms(
    state: SessionState,
    now: float,
    *,
    default_deadline_s: float | None = None,
    polling: bool = False,
) -> int | None:
    """How long to wait for events, in ms (at least 1); None: without a time (parked)."""
    wake = wake_at(state, now, default_deadline_s=default_deadline_s, polling=polling)
    if wake is None:
        return None
    return max(1, int((wake - now) * 1000))
