"""The waiting decision: until when a session waits for events before it looks again.

A session with nothing to do until an event (an approval, a signal, a step's outcome, a
command) parks: it waits on its mailbox with no time at all, and costs nothing until the
event hub hands it something. Only what the loop must do at a time sets one (the event hub
then wakes it through the supervisor's one timer heap, supervisor/io/wake_timers.py):

- a retry's back-off ends (the step is dispatched then);
- the session's deadline passes (it ends failed then);
- the watchdog or the no-consumer watch is due (``look_at``, from session/sending.py: an
  attempt in flight may be declared lost, a queue may need a warning, steps held back for a
  worker are looked at again).
"""

from __future__ import annotations

from planloop.core.models import StepStatus
from planloop.supervisor.session.state import SessionState

POLL_S = 1.0  # attempts in flight and no ``look_at`` given: the watchdog's plain poll
DEADLINE_SLACK_S = 0.01  # the end checks "past the deadline": wake just after it


def wake_at(
    state: SessionState,
    now: float,
    *,
    default_deadline_s: float | None,
    look_at: float | None = None,
    watched: bool = False,
) -> float | None:
    """The wall-clock time the session must look again without an event; None: it parks
    until one arrives. ``look_at``: when the watchdog or the no-consumer watch is due;
    ``watched``: they gave it (without them, attempts in flight are looked at every
    ``POLL_S``)."""
    times: list[float] = []
    if look_at is not None:
        times.append(look_at)
    elif not watched and state.running():
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
    look_at: float | None = None,
    watched: bool = False,
) -> int | None:
    """How long to wait for events, in ms (at least 1); None: without a time (parked)."""
    wake = wake_at(
        state, now, default_deadline_s=default_deadline_s, look_at=look_at, watched=watched
    )
    if wake is None:
        return None
    return max(1, int((wake - now) * 1000))
