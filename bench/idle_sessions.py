"""What waiting sessions cost one supervisor: ``bench/sessions.py --idle N``.

On a private redis-server, with one supervisor and one worker:

1. a baseline window with no session: the supervisor's CPU and Redis's command rate;
2. ``N`` sessions whose only step waits for a person's approval are submitted, and the bench
   waits (up to ``--setup-timeout``) until each is waiting; if not all get there in time it
   says how many did and measures those;
3. the same window again: supervisor CPU % of a core, Redis commands per second per waiting
   session (the window's rate less the baseline's, over the waiting sessions: the worker's
   own polls and heartbeats are in both windows and cancel out), and the supervisor's RSS
   growth per waiting session; and the Redis server's own CPU (``INFO cpu``), which the
   event hub's one read over every waiting session's stream costs.

Commands come from ``INFO commandstats`` after ``CONFIG RESETSTAT`` (scripts' inner calls
included); the bench sends nothing during a window.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from bench.common import BenchEnv, cpu_seconds, print_table
from planloop.core.keys import Keys
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer

GATE = "gate"
CONTROL_COMMANDS = ("config|", "info")
TARGET_CPU_PCT, TARGET_COMMANDS_PER_S = 5.0, 0.1  # at 10,000 waiting sessions
CHECK_BATCH = 1000  # sessions checked per pipeline while waiting for them to park


@dataclass(frozen=True)
class Window:
    """One measurement window: supervisor CPU % of a core and Redis commands per second."""

    seconds: float
    cpu_pct: float
    commands_per_s: float
    by_command: Counter[str] = field(default_factory=Counter)  # calls in the window
    redis_cpu_pct: float = float("nan")  # the Redis server's CPU, % of a core


@dataclass(frozen=True)
class IdleResult:
    asked: int
    waiting: int  # how many reached "awaiting approval" within the setup timeout
    submit_s: float
    setup_s: float  # first submit -> all (or the last counted) waiting
    baseline: Window
    loaded: Window
    rss_kib_per_session: float

    @property
    def commands_per_session_s(self) -> float:
        extra = self.loaded.commands_per_s - self.baseline.commands_per_s
        return extra / self.waiting if self.waiting else float("nan")


def gated_plan() -> Plan:
    """One step that waits for `planloop approve --step`: the session waits, owned."""
    return Plan(
        goal="idle session",
        steps=[Step(id=GATE, tool="bench.sleep", params={"seconds": 0}, requires_approval=True)],
    )


def rss_kib(pid: int) -> float:
    """Resident set size of ``pid`` in KiB (Linux /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


def redis_calls(bench: BenchEnv) -> Counter[str]:
    """Commands the server ran since the last reset, the bench's own CONFIG/INFO left out."""
    stats = cast(dict[str, Any], bench.redis.info("commandstats"))
    calls: Counter[str] = Counter()
    for name, row in stats.items():
        command = name.removeprefix("cmdstat_")
        if not command.startswith(CONTROL_COMMANDS):
            calls[command] = int(row["calls"])
    return calls


def redis_cpu_s(bench: BenchEnv) -> float:
    """CPU seconds the Redis server used so far (user + system, its main thread included)."""
    info = cast(dict[str, Any], bench.redis.info("cpu"))
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure_window(bench: BenchEnv, pid: int, seconds: float) -> Window:
    bench.redis.config_resetstat()
    cpu0, t0, rcpu0 = cpu_seconds(pid), time.monotonic(), redis_cpu_s(bench)
    time.sleep(seconds)
    cpu1, t1, rcpu1 = cpu_seconds(pid), time.monotonic(), redis_cpu_s(bench)
    calls = redis_calls(bench)
    elapsed = t1 - t0
    cpu = (cpu1 - cpu0) / elapsed * 100 if cpu0 is not None and cpu1 is not None else 0.0
    return Window(elapsed, cpu, calls.total() / elapsed, calls, (rcpu1 - rcpu0) / elapsed * 100)


def count_waiting(bench: BenchEnv, sids: list[str]) -> int:
    keys = Keys(bench.settings.key_prefix)
    waiting = 0
    for start in range(0, len(sids), CHECK_BATCH):
        pipe = bench.redis.pipeline(transaction=False)
        for sid in sids[start : start + CHECK_BATCH]:
            pipe.hget(keys.step(sid, GATE), "note")
        waiting += sum(note == "awaiting approval" for note in pipe.execute())
    return waiting


def measure_parked(
    bench: BenchEnv,
    producer: Producer,
    n: int,
    pid: int,
    *,
    window_s: float,
    setup_timeout_s: float,
) -> tuple[IdleResult, list[str]]:
    """Baseline, then ``n`` waiting sessions; returns the result and the session ids."""
    baseline = measure_window(bench, pid, window_s)
    rss_before = rss_kib(pid)
    t0 = time.monotonic()
    deadline = t0 + setup_timeout_s
    sids: list[str] = []
    for _ in range(n):
        sids.append(producer.submit(gated_plan()))
        if time.monotonic() > deadline:
            break
    submit_s = time.monotonic() - t0
    waiting = count_waiting(bench, sids)
    while waiting < len(sids) and time.monotonic() < deadline:
        time.sleep(1.0)
        waiting = count_waiting(bench, sids)
    setup_s = time.monotonic() - t0
    time.sleep(2.0)  # let the last checkpoints settle
    rss_after = rss_kib(pid)
    loaded = measure_window(bench, pid, window_s)
    per_session = (rss_after - rss_before) / waiting if waiting else float("nan")
    result = IdleResult(n, waiting, submit_s, setup_s, baseline, loaded, per_session)
    return result, sids


def print_idle(result: IdleResult) -> None:
    r = result
    print_table(
        f"Waiting sessions on one supervisor: {r.waiting:,} of {r.asked:,} waiting for approval "
        f"(submitted in {r.submit_s:.1f}s, {r.waiting:,} waiting after {r.setup_s:.1f}s)",
        ["window", "seconds", "supervisor CPU % of a core", "Redis commands/s",
         "Redis server CPU %"],
        [
            ["no session (baseline)", f"{r.baseline.seconds:.1f}",
             f"{r.baseline.cpu_pct:.1f}", f"{r.baseline.commands_per_s:.0f}",
             f"{r.baseline.redis_cpu_pct:.1f}"],
            [f"{r.waiting:,} waiting", f"{r.loaded.seconds:.1f}",
             f"{r.loaded.cpu_pct:.1f}", f"{r.loaded.commands_per_s:.0f}",
             f"{r.loaded.redis_cpu_pct:.1f}"],
        ],
    )  # fmt: skip
    if r.waiting < r.asked:
        print(
            f"idle: only {r.waiting:,} of {r.asked:,} sessions were waiting "
            "within the setup timeout"
        )
    cpu_each_ms = (r.loaded.cpu_pct - r.baseline.cpu_pct) * 10 / r.waiting if r.waiting else 0.0
    print(
        f"idle: N={r.waiting} supervisor_cpu={r.loaded.cpu_pct:.1f}% of a core "
        f"({cpu_each_ms:.3f} ms CPU/s per session; target <= {TARGET_CPU_PCT:g}% at 10,000) "
        f"redis={r.commands_per_session_s:.2f} commands/s per waiting session "
        f"(target <= {TARGET_COMMANDS_PER_S:g}) "
        f"rss={r.rss_kib_per_session:.1f} KiB per parked session "
        f"redis_server_cpu={r.loaded.redis_cpu_pct:.1f}% (baseline {r.baseline.redis_cpu_pct:.1f}%)"
    )
    if r.waiting:
        extra = r.loaded.by_command - r.baseline.by_command
        top = ", ".join(
            f"{name} {calls / r.loaded.seconds / r.waiting:.2f}"
            for name, calls in extra.most_common(8)
        )
        print(f"idle: commands/s per waiting session, by command: {top}")
