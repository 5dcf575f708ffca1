"""Plan validation against graphlib on the same graphs: 1k, 10k and 50k steps, and a chain.

Each step calls ``bench.echo`` with a ``{{ref}}`` to one dependency and depends on the step
before it and on one of the 20 before that (about two edges per step). ``validate_plan`` runs
every rule (ids, dependencies, cycles, tools, params, references); graphlib only orders the
graph, the floor any validation pays. The last line is the ratio at 10k steps.

Run from the repo root: ``python bench/validation.py`` or ``python -m bench.validation``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from graphlib import TopologicalSorter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import print_table
from core.tools import load_tools
from planner.plan import Plan, Step
from planner.validation import validate_plan

SIZES = (1_000, 10_000, 50_000)
CHAIN = 20_000
WINDOW = 20
TARGET_10K_S = 0.3


def build_plan(steps: int, *, chain: bool = False, seed: int = 7) -> Plan:
    """``steps`` echo steps, each referencing its first dependency's output."""
    rng = random.Random(seed)
    built: list[Step] = []
    for i in range(steps):
        deps: list[str] = []
        if i:
            deps.append(f"s{i - 1}")
            if not chain and i > 1:
                other = max(0, i - 2 - rng.randrange(WINDOW))
                deps.append(f"s{other}")
        params = {"value": f"{{{{{deps[0]}.output.value}}}}"} if deps else {"value": 0}
        built.append(Step(id=f"s{i}", tool="bench.echo", params=params, dependencies=deps))
    return Plan(goal="validation benchmark", steps=built)


def best_of(runs: int, work: Callable[[], object]) -> float:
    """Seconds of the fastest of ``runs`` runs (the machine is shared)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Runs per size; the best counts.")
    args = parser.parse_args()
    tools = load_tools(["workers.toolsets.bench"])
    rows: list[list[str]] = []
    ratio_10k = 0.0
    cases = [(n, False) for n in SIZES] + [(CHAIN, True)]
    for steps, chain in cases:
        plan = build_plan(steps, chain=chain)
        graph = {s.id: s.dependencies for s in plan.steps}
        edges = sum(len(deps) for deps in graph.values())
        ours = best_of(args.runs, lambda: validate_plan(plan, tools))  # noqa: B023
        floor = best_of(args.runs, lambda: list(TopologicalSorter(graph).static_order()))  # noqa: B023
        rows.append(
            [
                f"{steps:,}" + (" (chain)" if chain else ""),
                f"{edges:,}",
                f"{ours:.3f}",
                f"{floor:.3f}",
                f"{ours / floor:.1f}x",
            ]
        )
        if steps == 10_000 and not chain:
            ratio_10k = ours / floor
            seconds_10k = ours
    print_table(
        "validate_plan vs graphlib.TopologicalSorter(...).static_order() (best of runs)",
        ["steps", "edges", "validate_plan s", "graphlib s", "ratio"],
        rows,
    )
    print(
        f"10k steps: validate_plan {seconds_10k:.3f} s (target <= {TARGET_10K_S} s), "
        f"ratio to graphlib {ratio_10k:.1f}x"
    )


if __name__ == "__main__":
    main()
