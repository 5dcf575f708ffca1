"""The core runtime end to end: ordering, event-driven dispatch and the concurrency cap."""

from __future__ import annotations

import random
from typing import Any

import pytest

from planloop.core.models import SessionOptions, SessionStatus
from tests.integration.conftest import RunPlan, report_steps

pytestmark = pytest.mark.integration

DIAMOND = """
goal: diamond with timings
steps:
  - {id: a, tool: bench.echo, params: {value: {n: 1}}}
  - {id: b, tool: bench.sleep, params: {seconds: 0.05}, dependencies: [a]}
  - {id: c, tool: bench.echo, params: {value: "{{a.output.value.n}}"}, dependencies: [a]}
  - id: d
    tool: bench.echo
    params: {value: ["{{b.output.slept}}", "{{c.output.value}}"]}
    dependencies: [b, c]
"""


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals open at one instant."""
    # At equal times an end sorts before a start: touching intervals do not overlap.
    points = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    running = peak = 0
    for _, delta in points:
        running += delta
        peak = max(peak, running)
    return peak


def random_dag(rng: random.Random, size: int) -> tuple[dict[str, Any], dict[str, str]]:
    """A plan of ``size`` steps, each depending on 0-3 earlier ones.

    Returns the plan and, for each echo step, the sleep step whose output it references.
    """
    steps: list[dict[str, Any]] = []
    sleepers: list[str] = []
    references: dict[str, str] = {}
    for i in range(size):
        step_id = f"s{i:02d}"
        deps = sorted(rng.sample([s["id"] for s in steps], k=min(i, rng.randint(0, 3))))
        sleeping_deps = [d for d in deps if d in sleepers]
        if sleeping_deps and rng.random() < 0.3:
            source = rng.choice(sleeping_deps)
            references[step_id] = source
            steps.append(
                {
                    "id": step_id,
                    "tool": "bench.echo",
                    "params": {"value": f"{{{{{source}.output.slept}}}}"},
                    "dependencies": deps,
                }
            )
            continue
        sleepers.append(step_id)
        steps.append(
            {
                "id": step_id,
                "tool": "bench.sleep",
                "params": {"seconds": rng.randint(0, 20) / 1000},
                "dependencies": deps,
            }
        )
    return {"goal": f"random DAG of {size}", "steps": steps}, references


def test_diamond_join_starts_after_both_branches(run_plan: RunPlan) -> None:
    _sid, record = run_plan(DIAMOND)

    assert record.status == SessionStatus.COMPLETED
    steps = report_steps(record)
    assert {s["status"] for s in steps.values()} == {"completed"}
    assert steps["d"]["output"] == {"value": [0.05, 1]}
    assert steps["d"]["started_at"] >= steps["b"]["finished_at"]
    assert steps["d"]["started_at"] >= steps["c"]["finished_at"]
    assert steps["b"]["started_at"] >= steps["a"]["finished_at"]
    assert steps["c"]["started_at"] >= steps["a"]["finished_at"]


def test_random_dag_of_50_runs_each_step_once_after_its_dependencies(run_plan: RunPlan) -> None:
    plan, references = random_dag(random.Random(7), 50)
    assert references, "the seed should give some steps a reference to follow"

    _sid, record = run_plan(plan)

    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    assert len(steps) == 50
    for spec in plan["steps"]:
        step = steps[spec["id"]]
        assert step["status"] == "completed", (spec["id"], step)
        assert step["attempts"] == 1, (spec["id"], step["attempts"])
        for dep in spec["dependencies"]:
            assert step["started_at"] >= steps[dep]["finished_at"], (
                f"{spec['id']} started before its dependency {dep} finished"
            )
    for step_id, source in references.items():
        assert steps[step_id]["output"] == {"value": steps[source]["output"]["slept"]}


def test_fan_out_never_exceeds_the_session_concurrency_cap(run_plan: RunPlan) -> None:
    plan = {
        "goal": "fan-out of 20 under a cap of 3",
        "steps": [
            {"id": f"f{i:02d}", "tool": "bench.sleep", "params": {"seconds": 0.03}}
            for i in range(20)
        ],
    }

    _sid, record = run_plan(plan, SessionOptions(concurrency=3))

    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    assert {s["status"] for s in steps.values()} == {"completed"}
    intervals = [(s["started_at"], s["finished_at"]) for s in steps.values()]
    peak = max_overlap(intervals)
    assert peak <= 3, f"{peak} steps ran at once under a cap of 3"
    assert peak > 1, "the fan-out never ran two steps at once"


def test_fast_chain_does_not_wait_for_a_slow_sibling(run_plan: RunPlan) -> None:
    plan = """
goal: event-driven, not waves
steps:
  - {id: slow, tool: bench.sleep, params: {seconds: 1.0}}
  - {id: a, tool: bench.sleep, params: {seconds: 0.05}}
  - {id: b, tool: bench.sleep, params: {seconds: 0.05}, dependencies: [a]}
  - {id: c, tool: bench.sleep, params: {seconds: 0.05}, dependencies: [b]}
  - {id: join, tool: bench.echo, params: {value: done}, dependencies: [slow, c]}
"""
    _sid, record = run_plan(plan)

    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    slow = steps["slow"]
    # A wave executor would hold b until the first wave (slow and a) had finished.
    assert steps["b"]["started_at"] < slow["finished_at"]
    assert steps["c"]["finished_at"] < slow["finished_at"]
    assert steps["join"]["started_at"] >= slow["finished_at"]
    assert steps["join"]["started_at"] >= steps["c"]["finished_at"]
