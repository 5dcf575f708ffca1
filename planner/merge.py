"""Pure plan surgery for re-planning: freeze completed steps, prune orphans, inject new steps."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from planloop.core.errors import PlanValidationError
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_index import index_of, remember


def orphans(plan: Plan, removed: Collection[str], completed: Collection[str]) -> set[str]:
    """Steps that are not completed and depend, directly or transitively, on a removed step.

    The removed steps themselves are not included.
    """
    gone = set(removed)
    if not gone:
        return set()  # the usual re-plan that only adds steps: no walk over the plan
    dependents: dict[str, list[str]] = {}
    for step in plan.steps:
        for dep in step.dependencies:
            dependents.setdefault(dep, []).append(step.id)
    found: set[str] = set()
    todo = list(gone)
    while todo:  # one walk down the dependents: linear in steps + edges
        for child in dependents.get(todo.pop(), ()):
            if child not in gone and child not in found and child not in completed:
                found.add(child)
                todo.append(child)
    return found


def merge_remaining(
    plan: Plan, completed: Collection[str], cancel: Collection[str], subgraph: Sequence[Step]
) -> Plan:
    """The plan after an incremental re-plan (REPLAN_REMAINING).

    Completed steps stay exactly as they are; naming one in ``cancel`` has no effect. The
    ``cancel`` steps and their orphans are removed; every other step stays. A sub-graph step
    whose id is a removed or kept step's replaces it in place; other sub-graph steps are
    appended. A sub-graph step that repeats a completed step unchanged is dropped.

    Raises:
        PlanValidationError: ``cancel`` names an unknown step, a sub-graph step redefines a
            completed step, or no step would be left.
    """
    base = index_of(plan)
    known = base.by_id
    unknown = sorted(c for c in set(cancel) if c not in known)
    if unknown:
        raise PlanValidationError(
            f"cannot cancel unknown step(s) {', '.join(map(repr, unknown))} "
            f"(steps: {', '.join(plan.step_ids)})",
            step_id=unknown[0],
        )
    removed = {c for c in cancel if c not in completed}
    removed |= orphans(plan, removed, completed)
    incoming = _without_completed(plan, completed, subgraph)
    replacing = {s.id: s for s in incoming if s.id in known}
    steps = (
        [replacing.get(s.id, s) for s in plan.steps if s.id not in removed or s.id in replacing]
        if removed or replacing
        else list(plan.steps)  # the usual re-plan that only adds steps: a copy of pointers
    )
    steps += [s for s in incoming if s.id not in known]
    merged = _plan_like(plan, steps)
    if not removed:  # the merged index is the old one plus the k new steps
        remember(merged, base.with_steps(incoming))
    return merged


def replace_remaining(plan: Plan, completed: Collection[str], new_plan: Plan) -> Plan:
    """The plan after a full re-plan (REPLAN_FULL): completed steps, then ``new_plan``'s steps.

    Completed steps keep their definition and dependencies. A new step that repeats a
    completed step unchanged is dropped; the goal stays, constraints are the union of both.

    Raises:
        PlanValidationError: a new step reuses a completed step's id with another definition.
    """
    kept = [s for s in plan.steps if s.id in completed]
    steps = kept + _without_completed(plan, completed, new_plan.steps)
    constraints = list(dict.fromkeys([*plan.constraints, *new_plan.constraints]))
    return Plan(goal=plan.goal or new_plan.goal, steps=steps, constraints=constraints)


def inject_fallback(plan: Plan, failed_step: str) -> Plan:
    """The plan with ``failed_step``'s declared fallback sub-graph taking over its place.

    The fallback steps are inserted right after the failed step. Steps that depended on the
    failed step depend on the fallback's sink steps (those no other fallback step depends on)
    instead. The failed step stays (failed for good) without its fallback, which is spent.
    References to the failed step's output are left as they are: validation reports them.

    Raises:
        PlanValidationError: the step is unknown, declares no fallback, or a fallback id
            clashes with a step already in the plan.
    """
    failed = plan.step(failed_step)
    if not failed.fallback:
        raise PlanValidationError(
            f"step {failed_step!r} declares no fallback steps to inject", step_id=failed_step
        )
    ids = set(plan.step_ids)
    for extra in failed.fallback:
        if extra.id in ids:
            raise PlanValidationError(
                f"fallback step {extra.id!r} of step {failed_step!r} clashes with a step "
                "already in the plan",
                step_id=extra.id,
            )
    inner = {dep for s in failed.fallback for dep in s.dependencies}
    sinks = [s.id for s in failed.fallback if s.id not in inner]
    steps: list[Step] = []
    for step in plan.steps:
        if step.id == failed_step:
            steps.append(step.model_copy(update={"fallback": []}))
            steps.extend(failed.fallback)
        elif failed_step in step.dependencies:
            deps = [d for d in step.dependencies if d != failed_step] + sinks
            steps.append(step.model_copy(update={"dependencies": list(dict.fromkeys(deps))}))
        else:
            steps.append(step)
    return _plan_like(plan, steps)


def _without_completed(
    plan: Plan, completed: Collection[str], incoming: Sequence[Step]
) -> list[Step]:
    """``incoming`` minus unchanged repeats of completed steps; a changed repeat is refused."""
    kept: list[Step] = []
    before: Mapping[str, Step] | None = None
    for step in incoming:
        if step.id not in completed:
            kept.append(step)
            continue
        before = index_of(plan).by_id if before is None else before
        was = before.get(step.id)
        if was is not None and _same_call(was, step):
            continue
        raise PlanValidationError(
            f"a re-plan may not redefine completed step {step.id!r}; depend on it and "
            f"reference its output instead (use a new id for a new step)",
            step_id=step.id,
        )
    return kept


def _same_call(a: Step, b: Step) -> bool:
    return a.tool == b.tool and a.params == b.params and set(a.dependencies) == set(b.dependencies)


def _plan_like(plan: Plan, steps: list[Step]) -> Plan:
    """``plan`` with ``steps``; they were validated as steps already, so the copy does not
    validate them again (an O(n) walk per re-plan of an n-step plan)."""
    if not steps:
        raise PlanValidationError("the re-planned plan has no steps left")
    return plan.model_copy(update={"steps": steps, "constraints": list(plan.constraints)})
