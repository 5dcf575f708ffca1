"""A layered layout of a plan's DAG, computed here so the page only draws boxes and lines.

Layers are longest paths from the roots (a step sits one layer right of its deepest
dependency); inside a layer, steps are ordered by the mean position of their dependencies
(one barycentre pass), which keeps most edges short without a layout library.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from planloop.planner.plan import Plan

NODE_W = 170
NODE_H = 46
GAP_X = 60
GAP_Y = 22
MARGIN = 16


@dataclass(frozen=True)
class Node:
    """One step's box."""

    id: str
    tool: str
    layer: int
    x: int
    y: int


def layers_of(plan: Plan) -> dict[str, int]:
    """Step id -> layer (0 for steps without dependencies)."""
    by_id = plan.by_id
    layer: dict[str, int] = {}

    def depth(step_id: str, seen: frozenset[str]) -> int:
        if step_id in layer:
            return layer[step_id]
        deps = [d for d in by_id[step_id].dependencies if d in by_id and d not in seen]
        value = 1 + max((depth(d, seen | {step_id}) for d in deps), default=-1)
        layer[step_id] = value
        return value

    for step in plan.steps:
        depth(step.id, frozenset())
    return layer


def layout(plan: Plan) -> dict[str, Any]:
    """Boxes (``nodes``), ``edges`` as ``[from, to]`` and the drawing's ``width``/``height``."""
    layer = layers_of(plan)
    columns: dict[int, list[str]] = {}
    for step in plan.steps:  # plan order first: stable between versions
        columns.setdefault(layer[step.id], []).append(step.id)
    row: dict[str, float] = {}
    by_id = plan.by_id
    order = {step.id: float(i) for i, step in enumerate(plan.steps)}
    for index in sorted(columns):
        ids = columns[index]

        def weight(step_id: str) -> tuple[float, float]:
            deps = [row[d] for d in by_id[step_id].dependencies if d in row]
            return (sum(deps) / len(deps) if deps else 0.0, order[step_id])

        ids.sort(key=weight)
        for position, step_id in enumerate(ids):
            row[step_id] = float(position)
    nodes = [
        Node(
            id=step.id,
            tool=step.tool,
            layer=layer[step.id],
            x=MARGIN + layer[step.id] * (NODE_W + GAP_X),
            y=MARGIN + int(row[step.id]) * (NODE_H + GAP_Y),
        )
        for step in plan.steps
    ]
    edges = [[d, step.id] for step in plan.steps for d in step.dependencies if d in by_id]
    depth = max((len(ids) for ids in columns.values()), default=0)
    return {
        "nodes": [asdict(n) for n in nodes],
        "edges": edges,
        "width": 2 * MARGIN + len(columns) * (NODE_W + GAP_X) - GAP_X,
        "height": 2 * MARGIN + depth * (NODE_H + GAP_Y) - GAP_Y,
        "node_w": NODE_W,
        "node_h": NODE_H,
    }
