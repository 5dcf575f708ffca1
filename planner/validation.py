"""Plan validation: every rule a plan must keep before it runs, each error naming its culprit.

Checks run in a fixed order, each over all steps in plan order, so the same plan always
reports the same first error: duplicate ids, unknown dependencies, self-dependencies, cycles,
unknown tools, params that do not fit, answer steps out of place, references to
non-ancestors; then each step's fallback sub-graph the same way.

Every check is linear in steps + edges + references: one topological pass gives the ancestor
sets (bitsets) of the steps that hold references, and fallback sub-graphs reuse the sets of
the main steps they depend on instead of walking the plan again.
"""

from __future__ import annotations

import difflib
from collections import ChainMap
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from planloop.core.errors import PlanValidationError
from planloop.core.tools import ToolRegistry, ToolSpec
from planloop.planner.answer_step import ANSWER_TOOL, answer_plan_problems, answer_step_problem
from planloop.planner.dag import AncestorSet, BitIndex, ancestor_bits, find_cycle, reachable
from planloop.planner.plan import Plan, Step
from planloop.planner.react_step import REACT_TOOL, agent_step_problem
from planloop.planner.references import find_references, has_reference

Deps = Mapping[str, Sequence[str]]


def validate_plan(plan: Plan, tools: ToolRegistry, *, completed: Collection[str] = ()) -> None:
    """Raise on the first rule ``plan`` breaks.

    Args:
        plan: The plan (or re-planned sub-graph) to check.
        tools: The tools steps may call.
        completed: Ids of steps completed in an earlier plan version; steps may depend on them.

    Raises:
        PlanValidationError: naming the rule and the step that breaks it.
    """
    first = next(_plan_errors(plan, tools, completed), None)
    if first is not None:
        raise first


def all_errors(
    plan: Plan, tools: ToolRegistry, *, completed: Collection[str] = ()
) -> list[PlanValidationError]:
    """Every rule ``plan`` breaks, in the order :func:`validate_plan` checks them."""
    return list(_plan_errors(plan, tools, completed))


def validate_merge(old: Plan, new: Plan, completed: Collection[str]) -> None:
    """Refuse a re-plan that redefines a completed step (same id, other tool/params/deps).

    Raises:
        PlanValidationError: naming the completed step and what changed.
    """
    before = old.by_id
    for step in new.steps:
        if step.id not in completed or step.id not in before:
            continue
        was = before[step.id]
        changed = [
            name
            for name, same in (
                ("tool", was.tool == step.tool),
                ("params", was.params == step.params),
                ("dependencies", set(was.dependencies) == set(step.dependencies)),
            )
            if not same
        ]
        if changed:
            raise PlanValidationError(
                f"a re-plan may not redefine completed step {step.id!r} "
                f"(changed: {', '.join(changed)})",
                step_id=step.id,
            )


def _plan_errors(
    plan: Plan, tools: ToolRegistry, completed: Collection[str]
) -> Iterator[PlanValidationError]:
    by_id = plan.by_id
    outside: dict[str, Sequence[str]] = {c: () for c in completed if c not in by_id}
    taken = set(plan.step_ids) | set(completed)
    far = _far_by_step(plan.steps)
    index = BitIndex(only=set().union(*far.values()))
    yield from _graph_errors(plan.steps, tools, outside, taken, _Ancestry(index, ChainMap(), far))


class _Ancestry:
    """What the reference checks share down the fallback sub-graphs: each step's far
    references (``far``, by step object), and the ancestor bitsets of the enclosing graphs'
    steps that a fallback step depends on (``known``), over one :class:`BitIndex`."""

    def __init__(
        self, index: BitIndex, known: ChainMap[str, int], far: Mapping[int, set[str]]
    ) -> None:
        self.index = index
        self.known = known
        self.far = far


def _graph_errors(
    steps: Sequence[Step],
    tools: ToolRegistry,
    outside: Deps,
    taken: set[str],
    ancestry: _Ancestry,
) -> Iterator[PlanValidationError]:
    """Errors of one graph (the plan, or a fallback sub-graph) that may depend on ``outside``."""
    yield from _duplicate_ids(steps)
    yield from _unknown_dependencies(steps, set(outside))
    yield from _self_dependencies(steps)
    yield from _cycles(steps)
    yield from step_errors(steps, tools)
    for step_id, problem in answer_plan_problems(steps):
        yield PlanValidationError(f"step {step_id!r}: {problem}", step_id=step_id)
    deps: dict[str, Sequence[str]] = {**outside, **{s.id: s.dependencies for s in steps}}
    inner = _Ancestry(ancestry.index, ancestry.known.new_child(), ancestry.far)  # no copies
    yield from _bad_references(steps, deps, inner)
    for step in (s for s in steps if s.fallback):
        for extra in step.fallback:
            if extra.id in taken:
                yield _fallback_clash(step, extra)
            taken.add(extra.id)
        # a fallback may depend on any main-plan step and on its own steps
        yield from _graph_errors(step.fallback, tools, deps, taken, inner)


def _duplicate_ids(steps: Sequence[Step]) -> Iterator[PlanValidationError]:
    seen: set[str] = set()
    for step in steps:
        if step.id in seen:
            yield PlanValidationError(f"duplicate step id {step.id!r}", step_id=step.id)
        seen.add(step.id)


def _unknown_dependencies(
    steps: Sequence[Step], outside: set[str]
) -> Iterator[PlanValidationError]:
    known = {s.id for s in steps} | outside
    for step in steps:
        for dep in step.dependencies:
            if dep not in known:
                yield unknown_dependency(step, dep, known)


def unknown_dependency(step: Step, dep: str, known: Collection[str]) -> PlanValidationError:
    """The error of ``step`` depending on ``dep``, which is none of the ``known`` ids."""
    return PlanValidationError(
        f"step {step.id!r} depends on unknown step {dep!r}{_suggest(dep, known)}",
        step_id=step.id,
    )


def _self_dependencies(steps: Sequence[Step]) -> Iterator[PlanValidationError]:
    for step in steps:
        if step.id in step.dependencies:
            yield PlanValidationError(f"step {step.id!r} depends on itself", step_id=step.id)


def _cycles(steps: Sequence[Step]) -> Iterator[PlanValidationError]:
    local = {s.id: i for i, s in enumerate(steps)}
    graph = {
        s.id: [d for d in s.dependencies if d in local and d != s.id]  # self-loops reported above
        for s in steps
    }
    cycle = find_cycle(graph, local)
    if cycle:
        yield PlanValidationError(f"cycle: {' -> '.join(cycle)}", step_id=cycle[0])


def step_errors(steps: Sequence[Step], tools: ToolRegistry) -> Iterator[PlanValidationError]:
    """Unknown tools, then params that do not fit their tool, of ``steps`` in order."""
    yield from _unknown_tools(steps, tools)
    yield from _unfit_params(steps, tools)


def fallback_errors(
    owners: Sequence[Step], tools: ToolRegistry, plan: Plan, completed: Collection[str]
) -> Iterator[PlanValidationError]:
    """Errors of the fallback sub-graphs of ``owners`` (steps of ``plan``, whose other steps
    passed), as :func:`validate_plan` reports them."""
    by_id = plan.by_id
    deps: dict[str, Sequence[str]] = {c: () for c in completed if c not in by_id}
    deps.update((s.id, s.dependencies) for s in plan.steps)
    taken = set(deps)
    mine = {id(s) for s in owners}
    for other in plan.steps:
        if other.fallback and id(other) not in mine:
            taken.update(extra.id for extra in _all_fallback_steps(other))
    far = _far_by_step(owners)
    index = BitIndex(only=set().union(*far.values()))
    pinned = _fallback_dependencies(owners)
    known: ChainMap[str, int] = ChainMap()
    if index.only and pinned:
        graph = {s.id: s.dependencies for s in plan.steps}
        known.update(ancestor_bits(graph, index, needed=pinned) or {})
    ancestry = _Ancestry(index, known, far)
    for step in (s for s in owners if s.fallback):
        for extra in step.fallback:
            if extra.id in taken:
                yield _fallback_clash(step, extra)
            taken.add(extra.id)
        yield from _graph_errors(step.fallback, tools, deps, taken, ancestry)


def _fallback_clash(step: Step, extra: Step) -> PlanValidationError:
    return PlanValidationError(
        f"fallback step {extra.id!r} of step {step.id!r} clashes with "
        f"step id {extra.id!r} already in the plan",
        step_id=extra.id,
    )


def _all_fallback_steps(step: Step) -> Iterator[Step]:
    todo = list(step.fallback)
    while todo:
        extra = todo.pop()
        yield extra
        todo.extend(extra.fallback)


def _unknown_tools(steps: Sequence[Step], tools: ToolRegistry) -> Iterator[PlanValidationError]:
    for step in steps:
        if step.tool not in tools and step.tool not in (REACT_TOOL, ANSWER_TOOL):
            yield PlanValidationError(
                f"step {step.id!r}: unknown tool {step.tool!r}{_suggest(step.tool, tools.names())}",
                step_id=step.id,
            )
        if step.compensate and step.compensate.tool not in tools:
            name = step.compensate.tool
            yield PlanValidationError(
                f"step {step.id!r}: unknown compensation tool {name!r}"
                f"{_suggest(name, tools.names())}",
                step_id=step.id,
            )


def _unfit_params(steps: Sequence[Step], tools: ToolRegistry) -> Iterator[PlanValidationError]:
    for step in steps:
        if step.tool == REACT_TOOL:  # an agent step: its params name tools, fit no tool's
            problem = agent_step_problem(step, tools)
            if problem:
                yield PlanValidationError(f"step {step.id!r}: {problem}", step_id=step.id)
        if step.tool == ANSWER_TOOL:  # the session's answer: text and data
            problem = answer_step_problem(step)
            if problem:
                yield PlanValidationError(f"step {step.id!r}: {problem}", step_id=step.id)
        calls = [("", step.tool, step.params)]
        if step.compensate:
            calls.append(("compensation: ", step.compensate.tool, step.compensate.params))
        for prefix, name, params in calls:
            problem = params_problem(params, tools.get(name)) if name in tools else None
            if problem:
                yield PlanValidationError(f"step {step.id!r}: {prefix}{problem}", step_id=step.id)


def params_problem(params: Mapping[str, Any], spec: ToolSpec) -> str | None:
    """Why ``params`` do not fit ``spec``'s params, or None when they do.

    The spec says what fits, whether its contract is a local pydantic model or a JSON schema
    a worker published (core/published_tools.py). A param whose value holds a ``{{ref}}``
    is only checked to exist: its type is known at dispatch, when the reference is resolved.
    """
    if not spec.takes_extra_params():
        accepted = spec.param_names()
        for name in params:
            if name not in accepted:
                listed = ", ".join(sorted(accepted)) or "none"
                return f"param {name!r}: unknown param for tool {spec.name!r} (params: {listed})"
    errors = spec.params_errors(params)
    with_refs = {name for name, value in params.items() if has_reference(value)}
    for loc, message in errors:
        if with_refs and (not loc or str(loc[0]) in with_refs):
            continue  # placeholders cannot satisfy types or model-level checks yet
        where = ".".join(str(part) for part in loc)
        return f"param {where!r}: {message}" if where else f"params: {message}"
    return None


def _bad_references(
    steps: Sequence[Step], deps: Deps, ancestry: _Ancestry
) -> Iterator[PlanValidationError]:
    """References to steps that are not ancestors; fills ``ancestry.known`` for fallbacks.

    A reference to a direct dependency (or, from a compensation, to the step itself) is
    checked in O(1); only the other ("far") targets get bits in the ancestor sets, which
    one topological pass computes, and not at all when no reference in the plan is far.
    """
    far = {s.id: refs for s in steps if (refs := ancestry.far.get(id(s)))}
    pinned = _fallback_dependencies(steps)
    bits: dict[str, int] | None = {}
    if ancestry.index.only and (far or pinned):
        graph = {s.id: s.dependencies for s in steps}
        bits = None
        if len(graph) == len(steps):  # duplicate ids are reported above; walk the slow way
            bits = ancestor_bits(
                graph, ancestry.index, needed=far.keys() | pinned, outside=ancestry.known
            )
        if bits is not None:
            ancestry.known.update((node, bits[node]) for node in pinned if node in bits)
    for step in steps:
        refs = far.get(step.id)
        if not refs:
            continue
        allowed: Collection[str] = (
            AncestorSet(bits.get(step.id, 0), ancestry.index)
            if bits is not None
            else reachable(step.dependencies, deps)  # a cycle: reported above, error path only
        )
        for ref in sorted(r for r in refs if r not in allowed):
            yield not_an_ancestor(step, ref, deps)


def not_an_ancestor(step: Step, ref: str, deps: Deps) -> PlanValidationError:
    """The error of ``step`` referencing ``ref``, which is not among its ancestors."""
    what = repr(ref) if ref in deps else f"unknown step {ref!r}"
    listed = ", ".join(sorted(reachable(step.dependencies, deps))) or "none"
    return PlanValidationError(
        f"step {step.id!r} references {what} which is not among its dependencies "
        f"(ancestors: {listed})",
        step_id=step.id,
    )


def far_references(step: Step) -> set[str]:
    """Ids ``step`` (or its compensation) references that are not direct dependencies.

    A compensation runs after its step, so it may also read the step's own output.
    """
    refs = find_references(step.params)
    if step.compensate:
        refs |= find_references(step.compensate.params) - {step.id}
    if refs:
        refs.difference_update(step.dependencies)
    return refs


def _far_by_step(steps: Sequence[Step]) -> dict[int, set[str]]:
    """The far references of every step of ``steps`` and of their fallback sub-graphs that
    has some, by step object (ids may repeat in a plan that is invalid)."""
    found: dict[int, set[str]] = {}
    todo = list(steps)
    while todo:
        step = todo.pop()
        refs = far_references(step)
        if refs:
            found[id(step)] = refs
        todo.extend(step.fallback)
    return found


def _fallback_dependencies(steps: Sequence[Step]) -> set[str]:
    """Every dependency named by a fallback step anywhere below ``steps``."""
    found: set[str] = set()
    todo = [extra for s in steps for extra in s.fallback]
    while todo:
        extra = todo.pop()
        found.update(extra.dependencies)
        todo.extend(extra.fallback)
    return found


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(repr(c) for c in close)}?"
    names = sorted(known)
    if not names:
        return ""
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return f"; known: {shown}"
