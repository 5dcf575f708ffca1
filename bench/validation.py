"""Plan validation against graphlib on the same graphs (1k, 10k, 50k steps), and re-plan merges.

Each step calls ``bench.echo`` with a ``{{ref}}`` to one dependency and depends on the step
before it and on one of the 20 before that (about two edges per step). ``validate_plan`` runs
every rule (ids, dependencies, cycles, tools, params, references); graphlib only orders the
graph, the floor any validation pays. Two more rows: a 20,000-step chain, and 10,000 steps
that each read the step two before (a "far" reference, not a direct dependency: the case
that needs ancestor sets).

The merge table adds k = 10 steps to the end of an n-step plan (REPLAN_REMAINING) and checks
it two ways: the incremental check the re-planner uses (``validate_remaining_merge``) and
validating the whole merged plan (what every re-plan paid before). The first merge against a
plan object also builds its index of steps by id (O(n) once; later merges derive theirs).

Times are CPU seconds of this process, best of ``--runs`` (the machine is shared). The last
line gives the ratio to graphlib at 10k steps and the merge figures.

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
from planloop.core.tools import ToolRegistry, load_tools
from planloop.planner.merge import merge_remaining
from planloop.planner.merge_validation import validate_remaining_merge
from planloop.planner.plan import Plan, Step
from planloop.planner.validation import validate_merge, validate_plan

SIZES = (1_000, 10_000, 50_000)
CHAIN = 20_000
FAR = 10_000
MERGE_SIZES = (10_000, 50_000)
MERGE_K = 10
WINDOW = 20


def build_plan(steps: int, *, chain: bool = False, far: bool = False, seed: int = 7) -> Plan:
    """``steps`` echo steps, each referencing its first dependency's output (``far``: the
    step two before it, an ancestor but not a dependency)."""
    rng = random.Random(seed)
    built: list[Step] = []
    for i in range(steps):
        deps: list[str] = []
        if i:
            deps.append(f"s{i - 1}")
            if not chain and i > 1:
                other = max(0, i - 2 - rng.randrange(WINDOW))
                deps.append(f"s{other}")
        read = f"s{i - 2}" if far and i > 1 else (deps[0] if deps else None)
        params = {"value": f"{{{{{read}.output.value}}}}"} if read else {"value": 0}
        built.append(Step(id=f"s{i}", tool="bench.echo", params=params, dependencies=deps))
    return Plan(goal="validation benchmark", steps=built)


def best_of(runs: int, work: Callable[[], object]) -> float:
    """CPU seconds of the fastest of ``runs`` runs (the machine is shared)."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def validation_rows(runs: int, tools: ToolRegistry) -> tuple[list[list[str]], float, float]:
    """Rows of the graphlib table; the 10k seconds and ratio."""
    rows: list[list[str]] = []
    seconds_10k = ratio_10k = 0.0
    cases = [(n, "", build_plan(n)) for n in SIZES]
    cases += [(CHAIN, " (chain)", build_plan(CHAIN, chain=True))]
    cases += [(FAR, " (far refs)", build_plan(FAR, far=True))]
    for steps, label, plan in cases:
        graph = {s.id: s.dependencies for s in plan.steps}
        edges = sum(len(deps) for deps in graph.values())
        ours = best_of(runs, lambda: validate_plan(plan, tools))  # noqa: B023
        floor = best_of(runs, lambda: list(TopologicalSorter(graph).static_order()))  # noqa: B023
        ratio = ours / floor if floor else float("inf")
        rows.append(
            [f"{steps:,}{label}", f"{edges:,}", f"{ours:.3f}", f"{floor:.3f}", f"{ratio:.1f}x"]
        )
        if steps == 10_000 and not label:
            seconds_10k, ratio_10k = ours, ratio
    return rows, seconds_10k, ratio_10k


def merge_rows(runs: int, tools: ToolRegistry) -> tuple[list[list[str]], dict[int, float]]:
    """Rows of the merge table; incremental seconds by plan size."""
    rows: list[list[str]] = []
    incremental: dict[int, float] = {}
    for n in MERGE_SIZES:
        current = build_plan(n)
        done = {f"s{i}" for i in range(n // 2)}
        last = f"s{n - 1}"
        incoming = [
            Step(
                id=f"new{j}",
                tool="bench.echo",
                params={"value": f"{{{{{last}.output.value}}}}"},
                dependencies=[last, *([f"new{j - 1}"] if j else [])],
            )
            for j in range(MERGE_K)
        ]

        def ours() -> None:
            merged = merge_remaining(current, done, [], incoming)  # noqa: B023
            validate_remaining_merge(current, merged, incoming, tools, completed=done)  # noqa: B023

        def first() -> None:
            fresh = current.model_copy()  # noqa: B023  (another object: its index is built)
            merged = merge_remaining(fresh, done, [], incoming)  # noqa: B023
            validate_remaining_merge(fresh, merged, incoming, tools, completed=done)  # noqa: B023

        def whole() -> None:
            merged = merge_remaining(current, done, [], incoming)  # noqa: B023
            validate_plan(merged, tools, completed=done)  # noqa: B023
            validate_merge(current, merged, done)  # noqa: B023

        ours()  # the plan in force has its index from an earlier merge or check
        fast, cold, slow = best_of(runs, ours), best_of(runs, first), best_of(runs, whole)
        incremental[n] = fast
        rows.append(
            [
                f"{n:,} + {MERGE_K}",
                f"{fast * 1000:.2f}",
                f"{cold * 1000:.1f}",
                f"{slow * 1000:.1f}",
                f"{slow / fast:.0f}x",
            ]
        )
    return rows, incremental


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Runs per case; the best counts.")
    args = parser.parse_args()
    tools = load_tools(["planloop.workers.toolsets.bench"])
    rows, seconds_10k, ratio_10k = validation_rows(args.runs, tools)
    print_table(
        "validate_plan vs graphlib.TopologicalSorter(...).static_order() (CPU s, best of runs)",
        ["steps", "edges", "validate_plan s", "graphlib s", "ratio"],
        rows,
    )
    merges, incremental = merge_rows(args.runs, tools)
    print_table(
        f"re-plan merge of {MERGE_K} steps: incremental check vs the whole merged plan (CPU ms)",
        [
            "plan + new steps",
            "incremental ms",
            "same, first merge on the plan ms",
            "whole plan ms",
            "ratio whole / incremental",
        ],
        merges,
    )
    small, large = (incremental[n] for n in MERGE_SIZES)
    print(
        f"10k steps: validate_plan {seconds_10k:.3f} s, {ratio_10k:.1f}x graphlib; "
        f"merge of {MERGE_K} into {MERGE_SIZES[0]:,} / {MERGE_SIZES[1]:,} steps: "
        f"{small * 1000:.2f} / {large * 1000:.2f} ms ({large / small:.1f}x for "
        f"{MERGE_SIZES[1] // MERGE_SIZES[0]}x the plan)"
    )


if __name__ == "__main__":
    main()
