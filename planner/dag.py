"""Pure graph helpers over a plan: ancestry, order, critical path, readiness, Mermaid."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from graphlib import CycleError, TopologicalSorter

from core.errors import PlanValidationError
from planner.plan import Plan

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
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        loop: list[str] = list(exc.args[1])[:-1]
        rank = {node: i for i, node in enumerate(order)}
        start = min(range(len(loop)), key=lambda i: (rank.get(loop[i], len(rank)), loop[i]))
        rotated = loop[start:] + loop[:start]
        return [*rotated, rotated[0]]
    return None


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
    for step_id in topological_order(plan):
        deps = [d for d in plan.step(step_id).dependencies if d in finish]
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
