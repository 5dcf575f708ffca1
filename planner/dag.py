"""Pure graph helpers over a plan: ancestry, order, critical path, readiness, Mermaid."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from graphlib import CycleError, TopologicalSorter

from planloop.core.errors import PlanValidationError
from planloop.planner.plan import Plan

# Mermaid classDef per step status; statuses not listed here get no class.
STATUS_STYLES: dict[str, str] = {
    "pending": "fill:#ffffff,stroke:#333333",
    "ready": "fill:#fff8dc,stroke:#b8860b",
    "running": "fill:#cce5ff,stroke:#1f6feb",
    "completed": "fill:#d4edda,stroke:#2e7d32",
    "failed": "fill:#f8d7da,stroke:#c62828",
    "interrupted": "fill:#ffe0b2,stroke:#ef6c00",
    "skipped": "fill:#e0e0e0,stroke:#757575",
    "cancelled": "fill:#e0e0e0,stroke:#757575,stroke-dasharray: 5 5",
}


def find_cycle(graph: Mapping[str, Iterable[str]], order: Iterable[str] = ()) -> list[str] | None:
    """A cycle in ``graph`` (node -> its dependencies), or None.

    The cycle is listed in data-flow order (``a, b, a``: b depends on a, a on b) and starts at
    the member that comes first in ``order``, so the same plan always prints the same cycle.
    """
    if kahn_order(graph) is not None:
        return None  # the common case, without graphlib's depth-first cycle search
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        loop: list[str] = list(exc.args[1])[:-1]
        rank = {node: i for i, node in enumerate(order)}
        start = min(range(len(loop)), key=lambda i: (rank.get(loop[i], len(rank)), loop[i]))
        rotated = loop[start:] + loop[:start]
        return [*rotated, rotated[0]]
    return None


def kahn_order(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """Nodes of ``graph`` (node -> its dependencies) dependencies first, or None on a cycle.

    One Kahn pass; dependencies that are not keys of ``graph`` are ignored.
    """
    dependents: dict[str, list[str]] = {node: [] for node in graph}
    missing: dict[str, int] = {}
    for node, deps in graph.items():
        count = 0
        for dep in deps:
            if dep in dependents:
                dependents[dep].append(node)
                count += 1
        missing[node] = count
    order = [node for node, count in missing.items() if not count]
    for node in order:  # grows while it is walked
        for child in dependents[node]:
            missing[child] -= 1
            if not missing[child]:
                order.append(child)
    return order if len(order) == len(missing) else None


def reachable(start: Iterable[str], edges: Mapping[str, Iterable[str]]) -> set[str]:
    """Every node reachable from ``start`` (included) by following ``edges``."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return seen


class BitIndex:
    """Bit positions for node names, given out on first sight, and back to names.

    With ``only``, just those names get a bit (every other name is 0), so ancestor sets
    answer "is t an ancestor?" for those targets alone and stay as small as the targets.
    """

    def __init__(self, only: Collection[str] | None = None) -> None:
        self.position: dict[str, int] = {}
        self.names: list[str] = []
        self.only = only

    def bit(self, name: str) -> int:
        """The one-bit int of ``name`` (0 for a name outside ``only``)."""
        pos = self.position.get(name)
        if pos is None:
            if self.only is not None and name not in self.only:
                return 0
            pos = self.position[name] = len(self.names)
            self.names.append(name)
        return 1 << pos

    def members(self, bits: int) -> Iterator[str]:
        """The names whose bits are set in ``bits``."""
        while bits:
            low = bits & -bits
            yield self.names[low.bit_length() - 1]
            bits ^= low


class AncestorSet(Collection[str]):
    """The ancestors of one node as a bitset over a :class:`BitIndex`: O(1) membership."""

    def __init__(self, bits: int, index: BitIndex) -> None:
        self.bits = bits
        self._index = index

    def __contains__(self, name: object) -> bool:
        pos = self._index.position.get(name) if isinstance(name, str) else None
        return pos is not None and bool(self.bits >> pos & 1)

    def __iter__(self) -> Iterator[str]:
        return self._index.members(self.bits)

    def __len__(self) -> int:
        return self.bits.bit_count()


def ancestor_bits(
    graph: Mapping[str, Sequence[str]],
    index: BitIndex,
    *,
    needed: Collection[str],
    outside: Mapping[str, int] | None = None,
) -> dict[str, int] | None:
    """Ancestor bitsets of the ``needed`` nodes of ``graph`` (node -> its dependencies).

    One pass in topological order: a node's set is its dependencies and their sets, so the
    cost is O(nodes + edges) big-int ORs. A node's set is dropped as soon as its last
    dependent has used it, unless it is needed (a 50,000-step chain holds two at a time).
    A dependency outside ``graph`` is a leaf, unless ``outside`` gives its ancestor bits.

    Returns:
        needed node -> bits, or None when ``graph`` has a cycle (the caller reports it).
    """
    outside = outside or {}
    local = {node: [d for d in deps if d in graph and d != node] for node, deps in graph.items()}
    order = kahn_order(local)
    if order is None:
        return None
    waiting = Counter(dep for deps in local.values() for dep in deps)
    live: dict[str, int] = {}
    found: dict[str, int] = {}
    for node in order:
        bits = 0
        for dep in graph[node]:
            if dep == node:
                bits |= index.bit(dep)  # a self-dependency is reported on its own
            elif dep in local:
                bits |= live[dep] | index.bit(dep)
                waiting[dep] -= 1
                if not waiting[dep]:
                    del live[dep]
            else:
                bits |= outside.get(dep, 0) | index.bit(dep)
        if node in needed:
            found[node] = bits
        if waiting[node]:
            live[node] = bits
    return found


def ancestors(plan: Plan, step_id: str) -> set[str]:
    """Every step ``step_id`` depends on, directly or transitively."""
    deps = {s.id: s.dependencies for s in plan.steps}
    return reachable(plan.step(step_id).dependencies, deps)


def descendants(plan: Plan, step_id: str) -> set[str]:
    """Every step that depends on ``step_id``, directly or transitively."""
    plan.step(step_id)  # fail loudly on an unknown id
    dependents: dict[str, list[str]] = {}
    for s in plan.steps:
        for dep in s.dependencies:
            dependents.setdefault(dep, []).append(s.id)
    return reachable(dependents.get(step_id, ()), dependents)


def topological_order(plan: Plan) -> list[str]:
    """Step ids, dependencies first; among steps free to go, plan order wins.

    Dependencies on steps outside the plan (completed in an earlier version) are ignored.

    Raises:
        PlanValidationError: the plan has a cycle.
    """
    position = {s.id: i for i, s in enumerate(plan.steps)}
    graph = {s.id: [d for d in s.dependencies if d in position] for s in plan.steps}
    cycle = find_cycle(graph, position)
    if cycle:
        raise PlanValidationError(f"cycle: {' -> '.join(cycle)}", step_id=cycle[0])
    sorter = TopologicalSorter(graph)
    sorter.prepare()
    free: list[tuple[int, str]] = []
    order: list[str] = []
    while sorter.is_active():
        for node in sorter.get_ready():
            heapq.heappush(free, (position[node], node))
        _, node = heapq.heappop(free)
        order.append(node)
        sorter.done(node)
    return order


def critical_path(plan: Plan, durations: Mapping[str, float]) -> tuple[float, list[str]]:
    """The longest chain of dependent steps, weighted by ``durations`` (missing = 0).

    Returns:
        The chain's total duration and its step ids, first step first.
    """
    finish: dict[str, float] = {}
    previous: dict[str, str | None] = {}
    by_id = plan.by_id
    for step_id in topological_order(plan):
        deps = [d for d in by_id[step_id].dependencies if d in finish]
        # ties go to the dependency listed first, so the answer is deterministic
        before = max(deps, key=lambda d: finish[d], default=None)
        start = finish[before] if before is not None else 0.0
        finish[step_id] = start + durations.get(step_id, 0.0)
        previous[step_id] = before
    end = max(finish, key=lambda s: finish[s])
    path: list[str] = []
    node: str | None = end
    while node is not None:
        path.append(node)
        node = previous[node]
    return finish[end], path[::-1]


def ready_steps(plan: Plan, statuses: Mapping[str, str], *, done: str = "completed") -> list[str]:
    """Pending steps (no status counts as pending) whose dependencies are all ``done``.

    Dependencies outside the plan (completed in an earlier version) must be in ``statuses`` too.
    """
    return [
        s.id
        for s in plan.steps
        if statuses.get(s.id, "pending") == "pending"
        and all(statuses.get(d) == done for d in s.dependencies)
    ]


def to_mermaid(plan: Plan, statuses: Mapping[str, str] | None = None) -> str:
    """A Mermaid ``flowchart TD`` of the plan, one node per step coloured by its status."""
    statuses = statuses or {}
    node = {s.id: f"s{i}" for i, s in enumerate(plan.steps)}
    lines = ["flowchart TD"]
    for s in plan.steps:
        status = str(statuses.get(s.id, "pending"))
        label = f"{s.id}<br/>{s.tool}<br/>{status}".replace('"', "#quot;")
        style = f":::{status}" if status in STATUS_STYLES else ""
        lines.append(f'    {node[s.id]}["{label}"]{style}')
    for s in plan.steps:
        lines.extend(f"    {node[d]} --> {node[s.id]}" for d in s.dependencies if d in node)
    lines.extend(f"    classDef {name} {style}" for name, style in STATUS_STYLES.items())
    return "\n".join(lines)
