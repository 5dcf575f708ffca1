"""Validating an incremental re-plan (REPLAN_REMAINING) by what it changed, not the whole plan.

The plan in force was valid when it was installed, and :func:`planner.merge.merge_remaining`
only removes steps with every step below them, replaces steps in place and appends new ones.
So a rule the merged plan breaks involves a step the sub-graph brought ("new" steps), or a
kept step below a step it redefined ("affected" steps, whose ancestors changed):

* ids, dependencies, tools, params and fallbacks are checked for the new steps only;
* a cycle must pass through a new step, and all its steps are below that step, so cycles are
  searched among the new steps and the kept steps below the redefined ones;
* references are checked for the new and affected steps; a reference to a direct dependency
  in O(1), the others with one ancestor pass over the steps above them.

Cost: O(k + the affected steps' edges + the steps above far references) for k new steps.
The steps-by-id index of the plan in force is built once per plan object
(:mod:`planner.plan_index`) and the merged plan's is derived from it, so the untouched steps
are not walked. The errors are the ones :func:`planner.validation.validate_plan` gives for
the same rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence

from planloop.core.errors import PlanValidationError
from planloop.core.tools import ToolRegistry
from planloop.planner.dag import AncestorSet, BitIndex, ancestor_bits, find_cycle, reachable
from planloop.planner.plan import Plan, Step
from planloop.planner.plan_index import PlanIndex, index_of
from planloop.planner.validation import (
    fallback_errors,
    far_references,
    not_an_ancestor,
    step_errors,
    unknown_dependency,
)


def validate_remaining_merge(
    current: Plan,
    merged: Plan,
    incoming: Sequence[Step],
    tools: ToolRegistry,
    *,
    completed: Collection[str],
) -> None:
    """Raise on the first rule ``merged`` breaks, checking only what ``incoming`` changed.

    Args:
        current: The plan in force; it passed :func:`planner.validation.validate_plan`.
        merged: ``merge_remaining(current, completed, cancel, incoming)``.
        incoming: The re-planner's sub-graph steps.
        tools: The tools steps may call.
        completed: Ids of the completed steps (their dependencies are completed too).

    Raises:
        PlanValidationError: naming the rule and the step that breaks it.
    """
    first = next(_merge_errors(current, merged, incoming, tools, completed), None)
    if first is not None:
        raise first


def _merge_errors(
    current: Plan,
    merged: Plan,
    incoming: Sequence[Step],
    tools: ToolRegistry,
    completed: Collection[str],
) -> Iterator[PlanValidationError]:
    old = index_of(current)
    before, index = old.by_id, index_of(merged).by_id
    # completed repeats were dropped; of a kept id given twice, the last one replaced it
    new = [
        s
        for s in incoming
        if s.id not in completed and (s.id not in before or index.get(s.id) is s)
    ]
    yield from _duplicates(new, index, old)
    for step in new:
        for dep in step.dependencies:
            if dep not in index and dep not in completed:
                yield unknown_dependency(step, dep, index.keys() | set(completed))
    for step in new:
        if step.id in step.dependencies:
            yield PlanValidationError(f"step {step.id!r} depends on itself", step_id=step.id)
    redefined = {s.id for s in new if s.id in before}
    affected = _below(merged, {s.id for s in new}, redefined)
    yield from _cycles(merged, index, affected)
    yield from step_errors(new, tools)
    deps: Mapping[str, Sequence[str]] = _Deps(index, completed)
    yield from _references(merged, affected, index, deps)
    if any(s.fallback for s in new):
        yield from fallback_errors(new, tools, merged, completed)


def _duplicates(
    new: Sequence[Step], index: Mapping[str, Step], old: PlanIndex
) -> Iterator[PlanValidationError]:
    """New ids given twice, or taken by a fallback step of a kept step.

    A kept step's id given twice replaces it once (the last one wins); a fresh one is
    appended twice.
    """
    counts = Counter(s.id for s in new if s.id not in old.by_id)
    for step_id, count in counts.items():
        if count > 1:
            yield PlanValidationError(f"duplicate step id {step_id!r}", step_id=step_id)
    for step in new:
        owner = old.fallback_owner.get(step.id)
        if owner is not None and index.get(owner) is old.by_id[owner]:  # the owner was kept
            yield PlanValidationError(
                f"fallback step {step.id!r} of step {owner!r} clashes with "
                f"step id {step.id!r} already in the plan",
                step_id=step.id,
            )


def _below(merged: Plan, new: set[str], redefined: set[str]) -> set[str]:
    """The new steps and every step below a redefined one (its ancestors may have changed).

    Kept steps only depend on ids the plan had, so steps below a new id are new, except
    below a redefined id: only then are the dependents of the whole plan looked at.
    """
    if not redefined:
        return set(new)
    dependents: dict[str, list[str]] = {}
    for step in merged.steps:
        for dep in step.dependencies:
            dependents.setdefault(dep, []).append(step.id)
    found = set(new)
    todo = list(redefined)
    while todo:
        for child in dependents.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cycles(
    merged: Plan, index: Mapping[str, Step], affected: set[str]
) -> Iterator[PlanValidationError]:
    graph = {
        node: [d for d in index[node].dependencies if d in affected and d != node]
        for node in sorted(affected)  # the same cycle every time when there are several
        if node in index
    }
    if not graph:
        return
    in_plan_order = (s.id for s in merged.steps if s.id in graph)  # read on a cycle only
    cycle = find_cycle(graph, in_plan_order)
    if cycle:
        yield PlanValidationError(f"cycle: {' -> '.join(cycle)}", step_id=cycle[0])


def _references(
    merged: Plan,
    affected: set[str],
    index: Mapping[str, Step],
    deps: Mapping[str, Sequence[str]],
) -> Iterator[PlanValidationError]:
    """Far references of the affected steps that do not point at an ancestor.

    One ancestor pass over the steps above the ones with far references, with bits for
    their targets alone.
    """
    steps = [index[node] for node in affected if node in index]
    far = {s.id: refs for s in steps if (refs := far_references(s))}
    if not far:
        return
    above = reachable(far, deps)  # the steps with far references and everything above them
    graph = {node: deps[node] for node in above}
    bits_index = BitIndex(only=set().union(*far.values()))
    bits = ancestor_bits(graph, bits_index, needed=far.keys())
    if bits is None:
        return  # a cycle, reported above
    bad = {
        node: sorted(ref for ref in refs if ref not in AncestorSet(bits.get(node, 0), bits_index))
        for node, refs in far.items()
    }
    bad = {node: refs for node, refs in bad.items() if refs}
    for node in (s.id for s in merged.steps if s.id in bad):  # plan order, on errors only
        for ref in bad[node]:
            yield not_an_ancestor(index[node], ref, deps)


class _Deps(Mapping[str, Sequence[str]]):
    """Dependencies by id in the merged plan; a completed step outside it has none."""

    def __init__(self, index: Mapping[str, Step], completed: Collection[str]) -> None:
        self._index = index
        self._completed = completed

    def __getitem__(self, key: str) -> Sequence[str]:
        step = self._index.get(key)
        if step is not None:
            return step.dependencies
        if key in self._completed:
            return ()
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._index or key in self._completed

    def __iter__(self) -> Iterator[str]:
        yield from self._index
        yield from (c for c in self._completed if c not in self._index)

    def __len__(self) -> int:
        return len(self._index) + sum(1 for c in self._completed if c not in self._index)
