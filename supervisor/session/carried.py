"""A forked session's carried steps (producer/lineage.py): installed as the loop loads it."""

from __future__ import annotations

from typing import Any

from planloop.core.models import SessionRecord, StepState
from planloop.supervisor.session.state import SessionState


def carry_in(state: SessionState) -> None:
    """Give the steps a fork carried over from its parent their completed states.

    Called once the plan is installed, on the first owner's start and on every takeover
    alike: the carried states are final, so installing them again changes nothing, and
    marking them dirty has the next checkpoint write their attempt rows to SQL (again, the
    same rows) however early a former owner died.
    """
    for step_id, fields in state.info.carried.items():
        if step_id in state.steps:
            state.states[step_id] = StepState.from_fields(fields)
            state.dirty.add(step_id)


def lineage_fields(info: SessionRecord) -> dict[str, Any]:
    """What the SQL record keeps of where the session came from (its claim's columns)."""
    if not info.forked_from:
        return {}
    return {"forked_from": info.forked_from, "forked_version": info.forked_version}
