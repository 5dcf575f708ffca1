"""How an ended session is told to the reflector: masked, and without any tool output."""

from __future__ import annotations

from planloop.core.masking import mask_text
from planloop.core.models import SessionStatus
from planloop.planner.reflection import SessionStory
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.lessons import Ended, known_values
from planloop.supervisor.session.state import SessionState

EVENTS_TOLD = 12  # the latest events the story names
ERROR_CHARS = 240  # one error, at most


def ended_session(state: SessionState, deliberation: Deliberation, critic_failed: bool) -> Ended:
    """The :class:`Ended` of a session whose outcome is set: its story, and the values (secret
    params, tool outputs) a lesson must never carry."""
    assert state.outcome is not None
    status, error = state.outcome
    plan_steps = state.plan.steps if state.steps else []
    tools = {s.tool for s in plan_steps}
    sensitive = frozenset(deliberation.sensitive.of_tools(tools))
    secrets, outputs = known_values(
        [s.params for s in plan_steps], list(state.outputs.values()), sensitive
    )
    replans = state.info.replans
    outcome = f"{status.value}" + (f": {mask_text(error, sensitive)}" if error else "")
    if replans:
        outcome += f" (after {replans} re-plan(s))"
    if critic_failed:
        outcome += " (the critic did not pass a round)"
    steps = []
    for step in plan_steps:
        st = state.states.get(step.id)
        line = f"{step.id} ({step.tool}): {st.status.value if st else 'pending'}"
        if st is not None and st.attempt > 1:
            line += f", {st.attempt} attempts"
        if st is not None and st.error:
            line += f"; error: {_short(mask_text(st.error, sensitive))}"
        steps.append(line)
    happened = [
        f"{e.type.value} {e.step_id}: {_short(mask_text(e.description, sensitive))}".strip()
        for e in deliberation.recent[-EVENTS_TOLD:]
        if e.description
    ]
    happened += [_short(mask_text(h, sensitive)) for h in deliberation.hints]
    story = SessionStory(
        goal=state.info.goal or state.plan.goal,
        outcome=outcome,
        what_happened=happened,
        steps=steps,
    )
    return Ended(
        sid=state.sid,
        status=SessionStatus(status),
        replans=replans,
        critic_failed=critic_failed,
        story=story,
        secrets=secrets,
        outputs=outputs,
        sensitive=sensitive,
    )


def _short(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."
