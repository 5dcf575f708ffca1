"""Throughput of trivial steps: one session of 2,000 independent steps vs. 2,000 bare Celery tasks.

Run from the repo root: ``python bench/throughput.py`` or ``python -m bench.throughput``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from celery import Celery

from bench.bare_tasks import INCR_TASK, stock_celery_config
from bench.common import (
    BenchEnv,
    CpuMeter,
    bare_worker,
    bench_env,
    console,
    percentile,
    planloop_stack,
    print_table,
    redis_pid,
    wait_for,
)
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer

TARGET_RATIO = 0.8
WORKER_THREADS = 8
SESSION_CONCURRENCY = 64
WARMUP_STEPS = 50


@dataclass(frozen=True)
class Timing:
    """One measured batch: how many, and the seconds from first submit/send to the last end."""

    n: int
    seconds: float
    send_s: float  # of which: submitting (validation + hot state) or sending the tasks
    notes: str = ""
    cpu: str = ""  # CPU ms per item, by process

    @property
    def rate(self) -> float:
        return self.n / self.seconds


def trivial_plan(n: int) -> Plan:
    return Plan(
        goal="throughput benchmark",
        steps=[Step(id=f"s{i}", tool="bench.sleep", params={"seconds": 0}) for i in range(n)],
    )


def run_planloop(
    producer: Producer, n: int, timeout_s: float, meter: CpuMeter | None = None
) -> Timing:
    """Submit one session of ``n`` independent steps; time submit -> session finished_at."""
    plan = trivial_plan(n)
    if meter:
        meter.start()
    t0 = time.time()
    sid = producer.submit(plan)
    send_s = time.time() - t0
    record = producer.wait(sid, timeout_s=timeout_s, poll_s=0.05)
    if meter:
        meter.stop()
    if record.status != SessionStatus.COMPLETED:
        console.print(
            f"[red]session {sid} did not complete: status={record.status.value} "
            f"error={record.error!r}[/red]"
        )
        raise SystemExit(1)
    states = producer.state.steps(sid, plan.step_ids).values()
    first_dispatch = min(st.dispatched_at for st in states)
    last_finish = max(st.finished_at for st in states)
    pickup = [st.started_at - st.dispatched_at for st in states]
    notes = (
        f"submit->1st dispatch {first_dispatch - t0:.2f}s, "
        f"steps {last_finish - first_dispatch:.2f}s, "
        f"last step->session end {record.finished_at - last_finish:.2f}s, "
        f"dispatch->start p50 {percentile(pickup, 50) * 1000:.0f}ms"
    )
    return Timing(n, record.finished_at - t0, send_s, notes, meter.per_item_ms(n) if meter else "")


def run_bare(
    bench: BenchEnv,
    sender: Celery,
    n: int,
    label: str,
    timeout_s: float,
    meter: CpuMeter | None = None,
) -> Timing:
    """Send ``n`` INCR tasks; time first send -> the task that counts to ``n``."""
    counter = f"{bench.settings.key_prefix}:bare:count:{label}"
    if meter:
        meter.start()
    t0 = time.time()
    for _ in range(n):
        sender.send_task(INCR_TASK, args=[counter, n], queue=bench.settings.queue)
    send_s = time.time() - t0
    wait_for(lambda: bench.redis.exists(f"{counter}:done_at"), timeout_s, f"{n} bare tasks", 0.01)
    if meter:
        meter.stop()
    done_at = float(bench.redis.get(f"{counter}:done_at") or 0)
    return Timing(n, done_at - t0, send_s, cpu=meter.per_item_ms(n) if meter else "")


def _meter(
    bench: BenchEnv, processes: list[subprocess.Popen[bytes]], pids: dict[str, int] | None = None
) -> CpuMeter:
    """CPU of the stack's supervisor and worker (or the given pids) and of a local Redis."""
    named = dict(pids or {})
    for proc in processes:
        role = "supervisor" if "supervisor" in proc.args else "worker"  # type: ignore[operator]
        named[role] = proc.pid
    server = redis_pid(bench.redis)
    if server is not None:
        named["redis"] = server
    return CpuMeter(named)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=2000, help="Steps / tasks per side.")
    args = parser.parse_args(argv)
    n = args.n
    with bench_env(
        "tp", session_concurrency=SESSION_CONCURRENCY, worker_concurrency=WORKER_THREADS
    ) as bench:
        with planloop_stack(bench, concurrency=WORKER_THREADS) as (stack, producer):
            run_planloop(producer, WARMUP_STEPS, timeout_s=120)
            ours = run_planloop(producer, n, timeout_s=600, meter=_meter(bench, stack.processes))
            console.print(f"planloop logs: {stack.log_dir}")
        sender = Celery("bench-driver", set_as_current=False)
        sender.conf.update(stock_celery_config(bench.settings))
        with bare_worker(bench, concurrency=WORKER_THREADS) as worker:
            run_bare(bench, sender, WARMUP_STEPS, "warmup", timeout_s=120)
            pids = {"sender": os.getpid(), "worker": worker.pid}
            meter = _meter(bench, [], pids)
            bare = run_bare(bench, sender, n, "measured", timeout_s=600, meter=meter)
        sender.close()
    print_table(
        f"Throughput: {n} trivial steps, 1 worker process x {WORKER_THREADS} threads "
        f"(session concurrency {SESSION_CONCURRENCY})",
        ["side", "items", "seconds", "per second", "submit/send s", "CPU ms per item", "notes"],
        [
            [
                "planloop (one session)",
                str(n),
                f"{ours.seconds:.2f}",
                f"{ours.rate:.0f}",
                f"{ours.send_s:.2f}",
                ours.cpu,
                ours.notes,
            ],
            [
                "bare Celery",
                str(n),
                f"{bare.seconds:.2f}",
                f"{bare.rate:.0f}",
                f"{bare.send_s:.2f}",
                bare.cpu,
                f"first send -> {n:,}th INCR",
            ],
        ],
    )
    print(
        f"throughput: planloop={ours.rate:.0f} steps/s bare-celery={bare.rate:.0f} tasks/s "
        f"ratio={ours.rate / bare.rate:.2f} (target >= {TARGET_RATIO})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
