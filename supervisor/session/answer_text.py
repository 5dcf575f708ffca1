"""The texts of a session's answer: its results, how it ended, Planloop's own account."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from planloop.core.masking import mask_text
from planloop.core.models import SessionStatus, StepStatus
from planloop.planner.answer_step import is_answer_step
from planloop.planner.context import StepResult, fit_results
from planloop.planner.summarizer import SessionAnswer
from planloop.supervisor.session.state import SessionState

RESULTS_CHARS = 12_000  # all results together, when no setting says otherwise
DEAD = (StepStatus.FAILED, StepStatus.INTERRUPTED, StepStatus.SKIPPED, StepStatus.CANCELLED)


def step_results(state: SessionState) -> list[StepResult]:
    """Every step of the plan with its status, error and output, for the results text."""
    out = []
    for step in state.plan.steps if state.steps else []:  # a goal answered with no plan has none
        st = state.states.get(step.id)
        out.append(
            StepResult(
                id=step.id,
                tool=step.tool,
                title=step.title or "",
                status=st.status.value if st else "pending",
                error=(st.error or "") if st else "",
                output=state.outputs.get(step.id),
                has_output=step.id in state.outputs,
            )
        )
    return out


def results_text(
    state: SessionState, sensitive: Collection[str] = (), *, budget_chars: int = RESULTS_CHARS
) -> str:
    """Every step of the plan with its status, error and output preview (tool data fenced
    in <data> blocks), shortened by the rule-based ladder past ``budget_chars``."""
    return fit_results(
        step_results(state),
        goal="",
        critique="",
        sensitive=sensitive,
        budget_chars=budget_chars,
        chat=None,
    )[0].text


def compensations_text(compensations: Sequence[Mapping[str, Any]]) -> str:
    """The compensations that ran, for the answer of a session that did not complete."""
    if not compensations:
        return ""
    done = [
        f"{c['step']}{'' if c.get('iteration') is None else ' turn ' + str(c['iteration'])} "
        f"{'undone' if c.get('status') == 'completed' else 'NOT undone'}"
        for c in compensations
    ]
    return "compensations: " + ", ".join(done)


def looks_complete(state: SessionState) -> bool:
    """Whether every step of the round completed (none failed, skipped or cancelled): the
    critic may then write the answer along with its verdict."""
    steps = state.plan.steps if state.steps else []
    return bool(steps) and all(
        (st := state.states.get(s.id)) is not None and st.status == StepStatus.COMPLETED
        for s in steps
    )


def ended_text(status: SessionStatus, reason: str) -> str:
    """How a session that did not complete ended, for the summarizer and the account."""
    return f"{status.value.upper()}: {mask_text(reason) or 'no reason given'}"


def stated_answer(state: SessionState) -> SessionAnswer | None:
    """The answer the plan's completed answer step stated, if it has one."""
    for step in reversed(state.plan.steps if state.steps else []):
        st = state.states.get(step.id)
        if is_answer_step(step) and st is not None and st.status == StepStatus.COMPLETED:
            output = state.outputs.get(step.id)
            if isinstance(output, dict) and output.get("text"):
                return SessionAnswer(
                    text=str(output["text"]), data=output.get("data"), source="answer_step"
                )
    return None


def account_text(state: SessionState, outcome: str) -> str:
    """Planloop's own account of a session, when no model may write its answer: how it
    ended, which steps completed, which failed (and why) and which did not run."""
    by_status: dict[str, list[str]] = {}
    errors: list[str] = []
    for step in state.plan.steps if state.steps else []:
        st = state.states.get(step.id)
        status = st.status.value if st else "pending"
        by_status.setdefault(status, []).append(step.id)
        if st is not None and st.error and st.status in DEAD:
            errors.append(f"{step.id}: {mask_text(st.error)}")
    parts = [f"The session ended {outcome}."]
    for status, ids in by_status.items():
        parts.append(f"{status.capitalize()}: {', '.join(ids)}.")
    if errors:
        parts.append("Errors: " + "; ".join(errors) + ".")
    return " ".join(parts)
