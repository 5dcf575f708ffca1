"""Many sessions on one supervisor: 1,000 sessions of 5 trivial steps vs. one of 5,000.

In one run, on one stack (one supervisor, one worker process):

1. idle: ``--sessions`` sessions whose only step waits for a person's approval are held by
   the supervisor; its RSS per idle session and its CPU while they wait are measured, then
   they are cancelled;
2. one session of ``--sessions * --steps`` independent trivial steps;
3. ``--sessions`` sessions of ``--steps`` independent trivial steps each, submitted back to
   back: steps per second, and the time from each submit to its session's first dispatch.

The last line is the ratio of (3)'s steps per second to (2)'s (target >= 0.8).

``--idle N`` instead measures only what ``N`` waiting sessions cost, on a private
redis-server: supervisor CPU, Redis commands per second and RSS per waiting session
(bench/idle_sessions.py).

Run from the repo root: ``python bench/sessions.py`` (``--quick`` for 200 x 5).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import (
    REPO_ROOT,
    BenchEnv,
    bench_env,
    console,
    cpu_seconds,
    percentile,
    planloop_stack,
    print_table,
    wait_for,
)
from bench.idle_sessions import measure_parked, print_idle
from planloop.core.keys import Keys
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer

TARGET_RATIO, TARGET_P99_S = 0.8, 1.0
WORKER_THREADS = 8
SESSION_CONCURRENCY = 64
WARMUP_STEPS = 50
IDLE_CPU_WINDOW_S = 3.0
GATE = "gate"


@dataclass(frozen=True)
class Throughput:
    """Steps run between the first submit and the last session's end."""

    steps: int
    seconds: float
    submit_s: float  # of which: submitting
    first_dispatch: list[float]  # per session: seconds from its submit to its first dispatch
    submitted_at: list[float]  # per session, in submit order: when its submit returned

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def trivial_plan(n: int, goal: str) -> Plan:
    return Plan(
        goal=goal,
        steps=[Step(id=f"s{i}", tool="bench.sleep", params={"seconds": 0}) for i in range(n)],
    )


def gated_plan() -> Plan:
    """One step that waits for `planloop approve --step`: the session idles, owned."""
    return Plan(
        goal="idle session",
        steps=[Step(id=GATE, tool="bench.sleep", params={"seconds": 0}, requires_approval=True)],
    )


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (Linux /proc; NaN elsewhere)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def statuses(bench: BenchEnv, sids: list[str]) -> list[str]:
    keys = Keys(bench.settings.key_prefix)
    pipe = bench.redis.pipeline(transaction=False)
    for sid in sids:
        pipe.hget(keys.session(sid), "status")
    return [str(s or "") for s in pipe.execute()]


def wait_ended(bench: BenchEnv, sids: list[str], timeout_s: float) -> None:
    def all_ended() -> bool:
        return all(s and SessionStatus(s).ended for s in statuses(bench, sids))

    try:
        wait_for(all_ended, timeout_s, f"{len(sids)} sessions to end", poll_s=0.1)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc} (statuses: {Counter(statuses(bench, sids))})") from None


def measure_idle(bench: BenchEnv, producer: Producer, n: int, pid: int) -> tuple[float, float]:
    """RSS (KiB) per idle session held, and the supervisor's CPU % while they wait."""
    keys = Keys(bench.settings.key_prefix)
    before = rss_mb(pid)
    sids = [producer.submit(gated_plan()) for _ in range(n)]

    def all_waiting() -> bool:
        pipe = bench.redis.pipeline(transaction=False)
        for sid in sids:
            pipe.hget(keys.step(sid, GATE), "note")
        return all(note == "awaiting approval" for note in pipe.execute())

    wait_for(all_waiting, 300, f"{n} sessions to wait for approval", poll_s=0.2)
    time.sleep(1.0)  # let the last checkpoints settle
    held = rss_mb(pid)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(IDLE_CPU_WINDOW_S)
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    idle_cpu = (cpu1 - cpu0) / (t1 - t0) * 100 if cpu0 is not None and cpu1 is not None else 0.0
    for sid in sids:
        producer.cancel(sid, "benchmark: idle phase over")
    wait_ended(bench, sids, 300)
    return (held - before) * 1024 / n, idle_cpu


def run_sessions(
    bench: BenchEnv, producer: Producer, sessions: int, steps: int, timeout_s: float
) -> Throughput:
    """Submit ``sessions`` sessions of ``steps`` steps back to back; wait for all to end."""
    plans = [trivial_plan(steps, f"sessions benchmark {i}") for i in range(sessions)]
    submitted: dict[str, float] = {}
    t0 = time.time()
    for plan in plans:
        submitted[producer.submit(plan)] = time.time()
    submit_s = time.time() - t0
    sids = list(submitted)
    wait_ended(bench, sids, timeout_s)
    step_ids = plans[0].step_ids
    last_end, first_dispatch = 0.0, []
    for sid in sids:
        record = producer.session(sid)
        if record.status != SessionStatus.COMPLETED:
            console.print(f"[red]session {sid} ended {record.status.value}: {record.error}[/red]")
            raise SystemExit(1)
        states = producer.state.steps(sid, step_ids).values()
        first_dispatch.append(min(st.dispatched_at for st in states) - submitted[sid])
        last_end = max(last_end, record.finished_at)
    return Throughput(
        sessions * steps, last_end - t0, submit_s, first_dispatch, [submitted[s] - t0 for s in sids]
    )


def measure_floor(
    bench: BenchEnv, producer: Producer, sessions: int, steps: int, supervisor_pid: int
) -> list[float]:
    """Per session, seconds from its submit to its first message sent by plain Celery.

    The platform floor of the first dispatch: the supervisor is paused (SIGSTOP), and
    bench/floor_relay.py, a process of its own reading the same inbox, sends each new
    session's first step message with ``send_task`` the moment it reads it. Same submitter,
    Redis and worker (which drops these messages: nobody owns the sessions). The sessions are
    cancelled before the supervisor goes on; it ends them without dispatching anything.
    """
    keys = Keys(bench.settings.key_prefix)
    group, sent_key = f"floor-{uuid.uuid4().hex[:8]}", f"{bench.settings.key_prefix}:bench:floor"
    bench.redis.xgroup_create(keys.inbox, group, id="$", mkstream=True)
    env = {**os.environ, **bench.env, "PYTHONPATH": str(REPO_ROOT)}
    relay = subprocess.Popen(
        [sys.executable, "-m", "bench.floor_relay", group, sent_key, str(sessions)],
        env=env,
        cwd=REPO_ROOT,
    )
    submitted: dict[str, float] = {}
    os.kill(supervisor_pid, signal.SIGSTOP)
    try:
        wait_for(lambda: bench.redis.exists(f"{sent_key}:ready"), 60, "the floor relay")
        plans = [trivial_plan(steps, f"platform floor {i}") for i in range(sessions)]
        for plan in plans:
            submitted[producer.submit(plan)] = time.time()
        wait_for(lambda: bench.redis.hlen(sent_key) >= sessions, 300, "the floor's messages")
        sent = {str(k): float(v) for k, v in bench.redis.hgetall(sent_key).items()}
        return [sent[sid] - at for sid, at in submitted.items()]
    finally:
        for sid in submitted:
            producer.cancel(sid, "benchmark: platform floor over")
        os.kill(supervisor_pid, signal.SIGCONT)
        try:
            relay.wait(30)
        except subprocess.TimeoutExpired:
            relay.kill()
            relay.wait(5)
        bench.redis.xgroup_destroy(keys.inbox, group)
        bench.redis.delete(sent_key, f"{sent_key}:ready")
        wait_ended(bench, list(submitted), 300)


def lease_losses(log_dir: Path) -> int:
    """How often the stack's supervisors logged a lease as lost (each loss retakes a session)."""
    return sum(
        log.read_text(errors="replace").count("lease lost")
        for log in log_dir.glob("supervisor*.log")
    )


@contextmanager
def py_spy(pid: int, out: str | None) -> Iterator[None]:
    """Sample ``pid`` with py-spy (if asked and installed) while the block runs."""
    if not out:
        yield
        return
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    # --nonblocking: samples without pausing the supervisor (a paused one loses leases)
    cmd = [
        exe,
        "record",
        "-p",
        str(pid),
        "-o",
        out,
        "--format",
        "raw",
        "-r",
        "200",
        "--nonblocking",
        "--gil",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # py-spy attaches
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def run_idle(n: int, window_s: float, setup_timeout_s: float) -> int:
    """``--idle N``: what N waiting sessions cost one supervisor, on a private Redis."""
    settings = {"session_concurrency": SESSION_CONCURRENCY, "worker_concurrency": WORKER_THREADS}
    with bench_env("idle", private_redis=True, **settings) as bench:  # noqa: SIM117
        with planloop_stack(bench, concurrency=WORKER_THREADS) as (stack, producer):
            supervisor = next(p for p in stack.processes if "supervisor" in p.args)  # type: ignore[operator]
            run_sessions(bench, producer, 1, WARMUP_STEPS, timeout_s=120)
            # The waiting sessions are not cancelled: the stack and its private Redis go.
            result, _ = measure_parked(
                bench,
                producer,
                n,
                supervisor.pid,
                window_s=window_s,
                setup_timeout_s=setup_timeout_s,
            )
            lost = lease_losses(stack.log_dir)
    print_idle(result)
    print(f"idle: {lost} lease(s) lost in the whole run")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=1000, help="Concurrent sessions.")
    parser.add_argument("--steps", type=int, default=5, help="Trivial steps per session.")
    parser.add_argument("--quick", action="store_true", help="200 sessions (a smoke run).")
    parser.add_argument("--keep-logs", metavar="DIR", help="Copy the stack's logs to DIR.")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="Also measure the platform floor of the first dispatch (plain Celery sends).",
    )
    parser.add_argument(
        "--dump",
        metavar="FILE",
        help="Write each session's submit time and first-dispatch delay (JSON) to FILE.",
    )
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="Record the supervisor with py-spy (collapsed stacks) during the many-sessions run.",
    )
    parser.add_argument(
        "--idle",
        type=int,
        metavar="N",
        help="Only measure N sessions waiting for approval (CPU, Redis commands/s, RSS each).",
    )
    parser.add_argument(
        "--window", type=float, default=10.0, help="Seconds per --idle measurement window."
    )
    parser.add_argument(
        "--setup-timeout",
        type=float,
        default=300.0,
        help="With --idle: seconds to wait for the sessions to be waiting; measures what it got.",
    )
    args = parser.parse_args(argv)
    if args.idle is not None:
        return run_idle(args.idle, args.window, args.setup_timeout)
    sessions = 200 if args.quick else args.sessions
    steps = args.steps
    total = sessions * steps
    settings = {"session_concurrency": SESSION_CONCURRENCY, "worker_concurrency": WORKER_THREADS}
    with bench_env("sess", **settings) as bench:  # noqa: SIM117 (the stack needs the env)
        with planloop_stack(bench, concurrency=WORKER_THREADS) as (stack, producer):
            supervisor = next(p for p in stack.processes if "supervisor" in p.args)  # type: ignore[operator]
            run_sessions(bench, producer, 1, WARMUP_STEPS, timeout_s=120)
            load0 = Path("/proc/loadavg").read_text().split()[0]
            rss_kib, idle_cpu = measure_idle(bench, producer, sessions, supervisor.pid)
            one = run_sessions(bench, producer, 1, total, timeout_s=900)
            cpu0 = cpu_seconds(supervisor.pid) or 0.0
            with py_spy(supervisor.pid, args.py_spy):
                many = run_sessions(bench, producer, sessions, steps, timeout_s=900)
            many_cpu = (cpu_seconds(supervisor.pid) or 0.0) - cpu0
            floor = (
                measure_floor(bench, producer, sessions, steps, supervisor.pid)
                if args.floor
                else []
            )
            load1 = Path("/proc/loadavg").read_text().split()[0]
            rss_end = rss_mb(supervisor.pid)
            lost = lease_losses(stack.log_dir)
            if args.keep_logs:
                shutil.copytree(stack.log_dir, args.keep_logs, dirs_exist_ok=True)
    if args.dump:
        Path(args.dump).write_text(
            json.dumps({"submitted_at": many.submitted_at, "first_dispatch": many.first_dispatch})
        )
    p50, p99 = percentile(many.first_dispatch, 50), percentile(many.first_dispatch, 99)
    print_table(
        f"Many sessions: 1 supervisor, 1 worker process x {WORKER_THREADS} threads "
        f"(session concurrency {SESSION_CONCURRENCY}; load average {load0} -> {load1})",
        ["run", "steps", "seconds", "steps/s", "submit s", "submit->1st dispatch p50/p99"],
        [
            ["one session", str(total), f"{one.seconds:.2f}", f"{one.rate:.0f}",
             f"{one.submit_s:.2f}", f"{one.first_dispatch[0]:.3f}s"],
            [f"{sessions} sessions x {steps}", str(total), f"{many.seconds:.2f}",
             f"{many.rate:.0f}", f"{many.submit_s:.2f}", f"{p50:.3f}s / {p99:.3f}s"],
        ] + ([
            [f"platform floor: {sessions} x send_task", "-", "-", "-", "-",
             f"{percentile(floor, 50):.3f}s / {percentile(floor, 99):.3f}s"],
        ] if floor else []),
    )  # fmt: skip
    print(
        f"idle: {rss_kib:.1f} KiB RSS per idle session held, supervisor CPU {idle_cpu:.0f}% "
        f"with {sessions} idle sessions; supervisor RSS at the end {rss_end:.0f} MiB"
    )
    print(
        f"supervisor: {many_cpu:.1f} CPU s in the {sessions}-session run; "
        f"{lost} lease(s) lost in the whole run"
    )
    print(
        f"first dispatch under load: p50={p50 * 1000:.0f}ms p99={p99 * 1000:.0f}ms "
        f"(target p99 <= {TARGET_P99_S * 1000:.0f}ms)"
    )
    if floor:
        f50, f99 = percentile(floor, 50), percentile(floor, 99)
        print(
            f"platform floor (plain Celery send_task per submit, supervisor paused): "
            f"p50={f50 * 1000:.0f}ms p99={f99 * 1000:.0f}ms"
        )
    print(
        f"sessions: one={one.rate:.0f} steps/s many={many.rate:.0f} steps/s "
        f"ratio={many.rate / one.rate:.2f} (target >= {TARGET_RATIO})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
