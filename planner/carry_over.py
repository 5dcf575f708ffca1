"""Which completed steps of a parent session a fork keeps instead of running them again.

A step is carried over when the new plan keeps it as it ran: the parent completed it, the
new plan's step has the same tool, params, dependencies and instruction (what decides its
output; plan_diff.py's one diff says which fields changed), and every one of its
dependencies is carried too (so its resolved params, built from their outputs, are the
same). Everything else runs in the fork. Pure: no Redis, no SQL.
"""

from __future__ import annotations

from collections.abc import Mapping

from planloop.core.models import StepState, StepStatus
from planloop.planner.plan import Plan
from planloop.planner.plan_diff import changed_fields

# The fields of a step that decide what it does (a change of any other field, a title or a
# timeout, leaves its recorded output valid).
RUN_FIELDS = frozenset({"tool", "params", "dependencies", "instruction"})


def carry_over(
    parent_plan: Plan,
    parent_steps: Mapping[str, StepState],
    new_plan: Plan,
    *,
    parent_sid: str,
) -> dict[str, StepState]:
    """The states the fork's steps start with (step id -> completed state), in plan order.

    ``parent_plan`` is the plan whose definitions the parent's steps ran with (its latest
    version: a completed step is never redefined by a re-plan); ``parent_steps`` their
    states. A carried state keeps the parent's attempt, times, worker and output reference
    (outputs are stored by content, so the fork reads the same value); its note names the
    parent.
    """
    before, after = parent_plan.by_id, new_plan.by_id
    decided: dict[str, bool] = {}

    def keeps(step_id: str, path: tuple[str, ...] = ()) -> bool:
        if step_id in decided:
            return decided[step_id]
        if step_id in path or step_id not in after:  # a cycle or unknown id: validation's job
            return False
        new, old = after[step_id], before.get(step_id)
        st = parent_steps.get(step_id)
        same = (
            old is not None
            and st is not None
            and st.status == StepStatus.COMPLETED
            and not RUN_FIELDS.intersection(changed_fields(old, new))
        )
        ok = same and all(keeps(d, (*path, step_id)) for d in new.dependencies)
        decided[step_id] = ok
        return ok

    carried: dict[str, StepState] = {}
    for step in new_plan.steps:
        if keeps(step.id):
            st = parent_steps[step.id]
            carried[step.id] = st.model_copy(
                update={"epoch": 0, "note": f"carried from {parent_sid}", "requested_by": ""}
            )
    return carried
