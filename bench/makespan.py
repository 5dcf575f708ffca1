"""Makespan of a skewed two-level DAG: Planloop vs. a wave executor (and a bare Celery driver).

Run from the repo root: ``python bench/makespan.py`` or ``python -m bench.makespan``.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from celery import Celery

from bench.bare_driver import bare_sender, drive_bare
from bench.common import (
    BenchEnv,
    bare_worker,
    bench_env,
    console,
    median,
    percentile,
    planloop_stack,
    print_table,
)
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer

SHORT, LONG = 0.05, 1.0
WIDTH = 8
TARGET_OURS, TARGET_WAVE, TARGET_P50_MS = 1.05, 1.87, 5.0

# step id -> (seconds, dependencies)
Dag = dict[str, tuple[float, list[str]]]


def build_dag() -> Dag:
    """8 level-1 steps (one long), 8 level-2 steps (seven long, the odd one out short), a join."""
    dag: Dag = {}
    for i in range(WIDTH):
        dag[f"a{i}"] = (LONG if i == WIDTH - 1 else SHORT, [])
    for i in range(WIDTH):
        dag[f"b{i}"] = (LONG if i < WIDTH - 1 else SHORT, [f"a{i}"])
    dag["join"] = (SHORT, [f"b{i}" for i in range(WIDTH)])
    return dag


def critical_path(dag: Dag) -> float:
    """The longest chain of step durations: no executor can finish sooner."""
    finish: dict[str, float] = {}
    for step in TopologicalSorter({s: deps for s, (_, deps) in dag.items()}).static_order():
        seconds, deps = dag[step]
        finish[step] = seconds + max((finish[d] for d in deps), default=0.0)
    return max(finish.values())


def as_plan(dag: Dag) -> Plan:
    return Plan(
        goal="makespan benchmark",
        steps=[
            Step(id=s, tool="bench.sleep", params={"seconds": sec}, dependencies=deps)
            for s, (sec, deps) in dag.items()
        ],
    )


@dataclass
class Run:
    """Timestamps of one execution of the DAG (epoch seconds) and what follows from them."""

    dispatched: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    origin: float = 0.0  # submit / first send; makespan counts from here

    @property
    def makespan(self) -> float:
        """First dispatch to the last step's end."""
        return max(self.finished.values()) - min(self.dispatched.values())

    @property
    def makespan_from_start(self) -> float:
        """First step start to the last step's end."""
        return max(self.finished.values()) - min(self.started.values())

    def gaps(self, dag: Dag, until: dict[str, float]) -> list[float]:
        """Per dependent step: ``until[step]`` minus the latest end of its dependencies."""
        return [
            until[s] - max(self.finished[d] for d in deps) for s, (_, deps) in dag.items() if deps
        ]


# --- (a) Planloop on the real stack ------------------------------------------------------
def run_planloop(producer: Producer, plan: Plan, timeout_s: float) -> Run:
    """Submit, wait for the end, read the step timestamps from the hot state."""
    origin = time.time()
    sid = producer.submit(plan)
    record = producer.wait(sid, timeout_s=timeout_s, poll_s=0.02)
    if record.status != SessionStatus.COMPLETED:
        console.print(
            f"[red]session {sid} did not complete: status={record.status.value} "
            f"error={record.error!r}[/red]"
        )
        raise SystemExit(1)
    states = producer.state.steps(sid, plan.step_ids)
    run = Run(origin=origin)
    for step_id, st in states.items():
        run.dispatched[step_id] = st.dispatched_at
        run.started[step_id] = st.started_at
        run.finished[step_id] = st.finished_at
    return run


# --- (b) the wave executor ---------------------------------------------------------------
def run_waves(dag: Dag) -> Run:
    """Run every ready step on 8 threads, wait for the whole wave, then the next wave."""
    run = Run(origin=time.time())

    def work(step: str) -> None:
        run.started[step] = time.time()
        time.sleep(dag[step][0])
        run.finished[step] = time.time()

    order = TopologicalSorter({s: deps for s, (_, deps) in dag.items()})
    order.prepare()
    with ThreadPoolExecutor(WIDTH) as pool:
        while order.is_active():
            wave = order.get_ready()
            now = time.time()
            run.dispatched.update({s: now for s in wave})
            wait([pool.submit(work, s) for s in wave])
            order.done(*wave)
    return run


# --- (c) bare Celery driver --------------------------------------------------------------
def run_bare(bench: BenchEnv, sender: Celery, dag: Dag, rep: int, timeout_s: float) -> Run:
    """Send ready steps as bare tasks; each completion (pushed to a list) releases dependents."""
    run = Run(origin=time.time())
    drive_bare(bench, sender, [dag], [run], in_flight=1, tag=str(rep), timeout_s=timeout_s)
    return run


# --- the report --------------------------------------------------------------------------
def summarize(name: str, runs: list[Run], dag: Dag, cp: float, target: str) -> list[str]:
    spans = [r.makespan for r in runs]
    total = [g for r in runs for g in r.gaps(dag, r.started)]
    return [
        name,
        str(len(runs)),
        f"{median(spans):.3f}",
        f"{median([r.makespan_from_start for r in runs]):.3f}",
        f"{median(spans) / cp:.3f}",
        target,
        f"{percentile(total, 50) * 1000:.1f}",
        f"{percentile(total, 95) * 1000:.1f}",
    ]


def breakdown(runs: list[Run], dag: Dag) -> list[list[str]]:
    """Where a dependent step's start latency goes on the real stack."""
    react = [g for r in runs for g in r.gaps(dag, r.dispatched)]
    pickup = [r.started[s] - r.dispatched[s] for r in runs for s, (_, deps) in dag.items() if deps]
    total = [g for r in runs for g in r.gaps(dag, r.started)]
    first = [min(r.dispatched.values()) - r.origin for r in runs]
    rows = [
        ("last dependency finished -> dispatched (supervisor)", react),
        ("dispatched -> started (broker + worker claim)", pickup),
        ("last dependency finished -> started (total)", total),
        ("submit -> first dispatch (not in makespan)", first),
    ]
    return [
        [label, f"{percentile(v, 50) * 1000:.1f}", f"{percentile(v, 95) * 1000:.1f}"]
        for label, v in rows
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5, help="Measured runs per executor.")
    parser.add_argument("--no-bare", action="store_true", help="Skip the bare Celery driver.")
    args = parser.parse_args(argv)
    dag, cp = build_dag(), critical_path(build_dag())
    plan = as_plan(dag)
    console.print(f"DAG: {len(dag)} steps, critical path {cp:.2f}s, {args.reps} runs each")
    with bench_env("mk", session_concurrency=WIDTH, worker_concurrency=WIDTH) as bench:
        with planloop_stack(bench, concurrency=WIDTH) as (stack, producer):
            run_planloop(producer, plan, timeout_s=120)  # warm-up: worker start, imports
            ours = [run_planloop(producer, plan, timeout_s=60) for _ in range(args.reps)]
            console.print(f"planloop logs: {stack.log_dir}")
        waves = [run_waves(dag) for _ in range(args.reps)]
        bare: list[Run] = []
        if not args.no_bare:
            with bare_sender(bench) as sender, bare_worker(bench, concurrency=WIDTH):
                run_bare(bench, sender, dag, -1, timeout_s=120)
                bare = [run_bare(bench, sender, dag, i, timeout_s=60) for i in range(args.reps)]
    rows = [
        summarize("planloop (real stack)", ours, dag, cp, f"<= {TARGET_OURS}"),
        summarize("wave executor", waves, dag, cp, f"~ {TARGET_WAVE}"),
    ]
    if bare:
        rows.append(summarize("bare Celery driver", bare, dag, cp, "1.04 (issue)"))
    columns = ["executor", "runs", "makespan s", "from 1st start s", "/ crit. path", "target"]
    print_table(
        f"Makespan (median of {args.reps}; makespan = first dispatch -> last finish; "
        f"critical path {cp:.2f}s)",
        [*columns, "dep->start p50 ms", "p95 ms"],
        rows,
    )
    print_table(
        f"Planloop dispatch latency per dependent step (target p50 <= {TARGET_P50_MS:g} ms)",
        ["phase", "p50 ms", "p95 ms"],
        breakdown(ours, dag),
    )
    total = [g for r in ours for g in r.gaps(dag, r.started)]
    ratio_ours = median([r.makespan for r in ours]) / cp
    ratio_wave = median([r.makespan for r in waves]) / cp
    bare_part = f" bare-celery={median([r.makespan for r in bare]) / cp:.2f}" if bare else ""
    bare_gaps = [g for r in bare for g in r.gaps(dag, r.started)]
    bare_p50 = f" (bare Celery driver {percentile(bare_gaps, 50) * 1000:.1f}ms)" if bare else ""
    print(
        f"makespan/critical_path: planloop={ratio_ours:.2f} wave={ratio_wave:.2f}{bare_part} "
        f"| dispatch overhead p50={percentile(total, 50) * 1000:.1f}ms "
        f"p95={percentile(total, 95) * 1000:.1f}ms{bare_p50} "
        f"(targets: planloop<={TARGET_OURS} wave~{TARGET_WAVE} p50<={TARGET_P50_MS:g}ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
