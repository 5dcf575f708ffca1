"""worfbench's third side: the same plans on stock Celery, sent by the bare Celery driver.

The workers match the Planloop side's (``workers`` processes, the threads pool, the same
concurrency each) and run :mod:`bench.bare_tasks` with Planloop's Celery settings on kombu's
own Redis transport; :func:`bench.bare_driver.drive_bare` keeps ``in_flight`` plans running
and sends each node as soon as the results of its dependencies arrived. What is left between
this side and Planloop is Planloop itself, not Celery, kombu or the machine.
"""

from __future__ import annotations

import os
from contextlib import ExitStack

from bench.bare_driver import TimedDag, bare_sender, drive_bare
from bench.common import BenchEnv, CpuMeter, bare_worker, redis_pid
from bench.worfbench_runs import Dag, PlanRun


def _timed(dag: Dag, node_s: float) -> TimedDag:
    return {s: (node_s, deps) for s, deps in dag.items()}


def run_bare(
    bench: BenchEnv,
    plans: list[tuple[Dag, int]],
    warm: list[tuple[Dag, int]],
    *,
    node_s: float,
    in_flight: int,
    workers: int,
    concurrency: int,
    timeout_s: float,
) -> tuple[list[PlanRun], CpuMeter]:
    """Run ``warm`` (unmeasured), then ``plans``; their timestamps and the measured CPU of
    the driver (this process), the bare workers and a local Redis."""
    with bare_sender(bench) as sender, ExitStack() as stack:
        procs = [
            stack.enter_context(bare_worker(bench, concurrency=concurrency, index=i))
            for i in range(workers)
        ]

        def drive(some: list[tuple[Dag, int]], tag: str, wait_s: float) -> list[PlanRun]:
            runs = [PlanRun(dag, depth * node_s) for dag, depth in some]
            dags = [_timed(dag, node_s) for dag, _ in some]
            drive_bare(bench, sender, dags, runs, in_flight=in_flight, tag=tag, timeout_s=wait_s)
            return runs

        drive(warm, "warm", 120)
        server = redis_pid(bench.redis)
        named = {"driver": os.getpid(), **{f"worker{i}": p.pid for i, p in enumerate(procs)}}
        meter = CpuMeter(named if server is None else {**named, "redis": server})
        meter.start()
        runs = drive(plans, "measured", timeout_s)
        meter.stop()
    return runs, meter
