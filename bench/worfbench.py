"""Many small fan-out/fan-in DAGs, 50 in flight: Planloop, a bare Celery driver, in-process events.

The plans have the shape of WorFBench's gold workflow graphs (3-12 nodes, a few parallel
branches that join again). They are generated here from a seed: this bench never reads the
dataset over the network. Every node is ``bench.sleep`` for ``--node-s`` seconds (0.3). The
bare Celery driver (bench/worfbench_bare.py) runs them on stock Celery with the same workers.

Run from the repo root: ``python bench/worfbench.py`` or ``python -m bench.worfbench``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import (
    CpuMeter,
    bench_env,
    console,
    percentile,
    planloop_stack,
    print_table,
    redis_pid,
)
from bench.worfbench_bare import run_bare
from bench.worfbench_runs import Dag, PlanRun, attribution, ms, phases, rows_of
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer

TARGET_RATIO_P95 = 1.10
TARGET_CLOSE_P50_MS = 10.0
POLL_S = 0.01  # how often the driver looks for ended sessions (never inside a measured span)


def generate(rng: random.Random) -> tuple[Dag, int]:
    """One WorFBench-shaped graph and its depth (nodes on the critical path).

    3-12 nodes spread over 2-6 levels, at least one node per level; a node of level k
    depends on one node of level k-1 and, sometimes, on one or two nodes of earlier levels
    (the fan-in of a join). The roots fan out; the deepest level's nodes join the branches.
    """
    n = rng.randint(3, 12)
    depth = rng.randint(2, min(6, n))
    widths = [1] * depth
    for _ in range(n - depth):
        widths[rng.randrange(depth)] += 1
    dag: Dag = {}
    levels: list[list[str]] = []
    for k, width in enumerate(widths):
        level = [f"n{k}_{i}" for i in range(width)]
        for node in level:
            deps: set[str] = set()
            if k:
                deps.add(rng.choice(levels[k - 1]))
                earlier = [d for lv in levels for d in lv if d not in deps]
                extra = rng.choice((0, 0, 1, 2))
                deps.update(rng.sample(earlier, min(extra, len(earlier))))
            dag[node] = sorted(deps)
        levels.append(level)
    return dag, depth


def as_plan(dag: Dag, node_s: float, index: int) -> Plan:
    steps = [
        Step(id=s, tool="bench.sleep", params={"seconds": node_s}, dependencies=deps)
        for s, deps in dag.items()
    ]
    return Plan(goal=f"worfbench-shaped plan {index}", steps=steps)


# --- (a) Planloop on the real stack ------------------------------------------------------
def run_planloop(
    producer: Producer,
    plans: list[tuple[Dag, int]],
    node_s: float,
    in_flight: int,
    timeout_s: float,
) -> list[PlanRun]:
    """Keep ``in_flight`` sessions running until every plan ran; read their timestamps."""
    r, keys = producer.state.r, producer.state.keys
    todo = list(enumerate(plans))
    running: dict[str, int] = {}
    done: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    while todo or running:
        while todo and len(running) < in_flight:
            index, (dag, _) = todo.pop(0)
            running[producer.submit(as_plan(dag, node_s, index))] = index
        time.sleep(POLL_S)
        pipe = r.pipeline(transaction=False)
        for sid in running:
            pipe.hget(keys.session(sid), "status")
        for sid, status in zip(list(running), pipe.execute(), strict=True):
            if status is not None and SessionStatus(status).ended:
                if status != SessionStatus.COMPLETED.value:
                    record = producer.session(sid)
                    raise SystemExit(f"session {sid} ended {status}: {record.error!r}")
                done[sid] = running.pop(sid)
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(running) + len(todo)} plans not done within {timeout_s:g}s")
    runs = []
    for sid, index in sorted(done.items(), key=lambda item: item[1]):
        dag, depth = plans[index]
        run = PlanRun(dag, depth * node_s)
        for step_id, st in producer.state.steps(sid, dag).items():
            run.dispatched[step_id] = st.dispatched_at
            run.started[step_id] = st.started_at
            run.finished[step_id] = st.finished_at
        run.closed = producer.session(sid).finished_at
        run.visible = _ended_at(r, keys.progress(sid))
        runs.append(run)
    return runs


def _ended_at(r: Any, stream: str) -> float:
    """When the session's end was announced: the Redis time (ms) in the id of its 'ended'
    progress note, written right after the status (supervisor/session/finish.py)."""
    for entry_id, fields in r.xrevrange(stream, count=20):
        if fields.get("kind") == "ended":
            return int(str(entry_id).split("-")[0]) / 1000
    return float("nan")


# --- (b) the in-process event-driven executor --------------------------------------------
def run_events(
    plans: list[tuple[Dag, int]], node_s: float, in_flight: int, threads: int
) -> list[PlanRun]:
    """One thread pool; a node's end releases its dependents at once; ``in_flight`` plans."""
    runs = [PlanRun(dag, depth * node_s) for dag, depth in plans]
    lock = threading.Lock()
    slots = threading.Semaphore(in_flight)
    all_done = threading.Event()
    left = [len(runs)]
    pool = ThreadPoolExecutor(threads)

    def start_plan(run: PlanRun) -> None:
        waiting = {s: set(deps) for s, deps in run.dag.items()}
        dependents: dict[str, list[str]] = {s: [] for s in run.dag}
        for s, deps in run.dag.items():
            for d in deps:
                dependents[d].append(s)

        def node(step: str) -> None:
            run.started[step] = time.time()
            time.sleep(node_s)
            run.finished[step] = time.time()
            with lock:
                ready = []
                for child in dependents[step]:
                    waiting[child].discard(step)
                    if not waiting[child]:
                        ready.append(child)
                plan_done = len(run.finished) == len(run.dag)
            for child in ready:
                send(child)
            if plan_done:
                slots.release()
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        all_done.set()

        def send(step: str) -> None:
            run.dispatched[step] = time.time()
            pool.submit(node, step)

        for s in [s for s, deps in waiting.items() if not deps]:
            send(s)

    for run in runs:
        slots.acquire()
        start_plan(run)
    all_done.wait()
    pool.shutdown()
    return runs


def beside(rows: list[list[str]], others: list[list[str]]) -> list[list[str]]:
    """``rows`` with the figures of the same-labelled ``others`` row appended (blank if none)."""
    more = {row[0]: row[1:] for row in others}
    return [[*row, *more.get(row[0], [""] * (len(row) - 1))] for row in rows]


def _meter(processes: list[Any], server: int | None) -> CpuMeter:
    """CPU of the stack's supervisor, its workers and a local Redis."""
    named: dict[str, int] = {} if server is None else {"redis": server}
    for i, proc in enumerate(processes):
        role = "supervisor" if "supervisor" in proc.args else f"worker{i}"
        named[role] = proc.pid
    return CpuMeter(named)


# --- the report --------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--plans", type=int, default=200, help="Plans per executor.")
    parser.add_argument("--in-flight", type=int, default=50, help="Sessions running at once.")
    parser.add_argument("--node-s", type=float, default=0.3, help="Seconds per node.")
    parser.add_argument("--seed", type=int, default=25, help="Seed of the generated plans.")
    parser.add_argument("--threads", type=int, default=160, help="Worker threads (both sides).")
    parser.add_argument("--workers", type=int, default=1, help="Worker processes (Planloop).")
    parser.add_argument("--no-baseline", action="store_true", help="Skip the in-process run.")
    parser.add_argument("--no-bare", action="store_true", help="Skip the bare Celery driver.")
    parser.add_argument("--dump", type=Path, help="Write every plan's timestamps here (JSON).")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="A setting of the stack (e.g. admission_max_defer_s=0.5); repeatable.",
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    plans = [generate(rng) for _ in range(args.plans)]
    warm = [generate(random.Random(-1)) for _ in range(4)]
    nodes = sum(len(d) for d, _ in plans)
    console.print(
        f"{args.plans} generated WorFBench-shaped plans (seed {args.seed}; {nodes} nodes, "
        f"3-12 per plan), {args.node_s:g}s per node, {args.in_flight} in flight, "
        f"{args.workers} worker process(es) x {args.threads // args.workers} threads"
    )
    per_worker = max(1, args.threads // args.workers)
    overrides: dict[str, object] = {"worker_concurrency": per_worker, "session_concurrency": 16}
    overrides.update(item.split("=", 1) for item in args.set)
    with bench_env("wb", **overrides) as bench:
        stack_cm = planloop_stack(bench, concurrency=per_worker, workers=args.workers)
        with stack_cm as (stack, producer):
            run_planloop(producer, warm, args.node_s, args.in_flight, timeout_s=120)
            meter = _meter(stack.processes, redis_pid(bench.redis))
            meter.start()
            ours = run_planloop(producer, plans, args.node_s, args.in_flight, timeout_s=900)
            meter.stop()
            console.print(f"planloop logs: {stack.log_dir}")
        bare: list[PlanRun] = []
        bare_meter = CpuMeter({})
        if not args.no_bare:
            bare, bare_meter = run_bare(
                bench,
                plans,
                warm,
                node_s=args.node_s,
                in_flight=args.in_flight,
                workers=args.workers,
                concurrency=per_worker,
                timeout_s=60,
            )
    base = [] if args.no_baseline else run_events(plans, args.node_s, args.in_flight, args.threads)
    if args.dump is not None:
        sides = {"planloop": ours, "bare_celery": bare, "event_driven": base}
        args.dump.write_text(json.dumps({k: [vars(r) for r in v] for k, v in sides.items()}))
    columns = ["executor", "plans", "÷ ideal p50", "p95", "max", "dep->start p50 ms", "p95 ms"]
    named = [
        ("planloop (real stack)", "planloop", ours),
        ("bare Celery driver", "bare-celery", bare),
        ("in-process event-driven", "event-driven", base),
    ]
    rows = [rows_of(label, runs) for label, _, runs in named if runs]
    # the first wave starts as one burst of plans
    rows += [
        rows_of(f"{short}, after the first wave", runs[args.in_flight :])
        for _, short, runs in named
        if len(runs) > args.in_flight
    ]
    print_table(
        f"Per-plan duration (first dispatch -> last node's end) ÷ ideal (critical path); "
        f"target p95 <= {TARGET_RATIO_P95}",
        columns,
        rows,
    )
    print_table(
        f"Planloop phases, beside the bare Celery driver's (target: session close p50 <= "
        f"{TARGET_CLOSE_P50_MS:g} ms)",
        ["phase", "p50 ms", "p95 ms", "bare p50 ms", "bare p95 ms"],
        beside(phases(ours), phases(bare, sessions=False) if bare else []),
    )
    worst = f"mean of the worst {max(1, len(ours) // 10)}"
    print_table(
        "Where each plan's excess over the ideal goes (its critical chain)",
        ["part", "ms per plan, mean", worst, "bare: mean", "bare: worst"],
        beside(attribution(ours, args.node_s), attribution(bare, args.node_s)),
    )
    console.print(f"CPU ms per node over the measured run: {meter.per_item_ms(nodes)}")
    if bare:
        console.print(f"bare Celery driver, CPU ms per node: {bare_meter.per_item_ms(nodes)}")
    close = [r.closed - max(r.finished.values()) for r in ours]
    seen = [r.visible - max(r.finished.values()) for r in ours]
    react = [g for r in ours for g in r.released(r.dispatched)]
    pickup = [r.started[s] - r.dispatched[s] for r in ours for s in r.dag]
    ratios = " ".join(
        f"{short}={percentile([r.ratio for r in runs], 50):.3f}/"
        f"{percentile([r.ratio for r in runs], 95):.3f}"
        for _, short, runs in named
        if runs
    )
    print(
        f"per-plan/ideal p50/p95: {ratios} "
        f"| close p50={ms(close, 50)}ms end announced p50={ms(seen, 50)}ms "
        f"| finished->dispatched p50/p95={ms(react, 50)}/{ms(react, 95)}ms "
        f"| dispatched->started p50/p95={ms(pickup, 50)}/{ms(pickup, 95)}ms "
        f"(targets: p95<={TARGET_RATIO_P95} close p50<={TARGET_CLOSE_P50_MS:g}ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
