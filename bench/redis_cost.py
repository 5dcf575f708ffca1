"""What a step costs in Redis: commands, round trips and bytes per step, beside stock Celery.

In one run, on a private ``redis-server`` this bench starts on a free port (so no other
process's traffic is counted):

1. Planloop, a chain plan of ``-n`` steps (each depends on the one before) and a wide plan
   (one root, ``n - 1`` children of it), through a real stack: one supervisor and one worker
   started from the installed package;
2. stock Celery (Planloop's Celery settings, kombu's own Redis transport, bench/bare_tasks.py):
   a chain of ``n`` tasks, each sent after the previous one's result arrived, and ``n`` tasks
   sent at once; the driver that sends them and pops their results is counted, since it does
   the supervisor's part.

How each figure is measured, per phase (``CONFIG RESETSTAT`` before it):

- commands: ``INFO commandstats`` calls, which include the commands scripts run; the bench's
  own ``CONFIG``/``INFO`` and its completion polls (one HGET each) are taken off;
- bytes: ``total_net_input_bytes + total_net_output_bytes`` from ``INFO stats``, less the
  bytes of the completion polls (they go through a relay of their own that counts them);
- round trips: every client of the measured side reaches Redis through a counting relay
  (bench/wire_counter.py), which counts a round trip each time a client writes after a reply:
  a pipeline or MULTI/EXEC block is one, a blocking pop is one.

Background traffic during the phase (lease renewals, heartbeats, idle polls) is part of the
cost, so a slower run costs a little more per step. KB are 1,000 bytes.

Run from the repo root: ``python bench/redis_cost.py`` (``--json`` for machine output).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

import redis
from celery import Celery

from bench.bare_tasks import SLEEP_TASK, stock_celery_config
from bench.common import BenchEnv, bare_worker, console, planloop_stack, print_table
from bench.wire_counter import WireCounter
from planloop.config.settings import Settings
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer
from planloop.producer.stack import EmbeddedRedis
from planloop.workers.toolsets import BENCH_TOOLS

TARGET_COMMANDS, TARGET_KB, TARGET_CHAIN_ROUND_TRIPS = 12, 5.0, 4.3
WORKER_THREADS = 8
WARMUP_STEPS = 5
POLL_S = 0.2
TOP_COMMANDS = 12
# The bench's own commands on the control connection, never a cost.
CONTROL_COMMANDS = ("config|", "info")


@dataclass(frozen=True)
class Cost:
    """One measured phase: totals, and the steps they are divided by."""

    case: str
    steps: int
    seconds: float
    commands: int
    round_trips: int
    bytes: int  # from INFO stats, polls taken off
    relay_bytes: int  # what the relay carried: a cross-check of ``bytes``
    by_command: dict[str, int] = field(default_factory=dict)

    def per_step(self) -> dict[str, float]:
        return {
            "commands": self.commands / self.steps,
            "round_trips": self.round_trips / self.steps,
            "kb": self.bytes / self.steps / 1000,
        }


@dataclass
class CostRig:
    """The private Redis, the relays in front of it, and the settings the stack runs with."""

    bench: BenchEnv
    measured: WireCounter  # every client whose traffic is the cost
    polls: WireCounter  # the bench's completion polls
    poller: redis.Redis
    polls_sent: int = 0

    def start(self) -> None:
        self.bench.redis.config_resetstat()
        self.measured.reset()
        self.polls.reset()
        self.polls_sent = 0

    def poll(self, key: str, field_name: str) -> str | None:
        self.polls_sent += 1
        value = self.poller.hget(key, field_name)
        return None if value is None else str(value)

    def stop(self, case: str, steps: int, seconds: float) -> Cost:
        """Read the server's counters and the relays', less the bench's own traffic."""
        stats = cast(dict[str, Any], self.bench.redis.info("stats"))
        raw = cast(dict[str, Any], self.bench.redis.info("commandstats"))
        wire, polled = self.measured.snapshot(), self.polls.snapshot()
        calls: Counter[str] = Counter()
        for name, row in raw.items():
            command = name.removeprefix("cmdstat_")
            if not command.startswith(CONTROL_COMMANDS):
                calls[command] = int(row["calls"])
        calls["hget"] -= self.polls_sent
        calls = +calls  # drops the zero rows
        total_bytes = int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"])
        return Cost(
            case=case,
            steps=steps,
            seconds=seconds,
            commands=sum(calls.values()),
            round_trips=wire.round_trips,
            bytes=total_bytes - polled.bytes_in - polled.bytes_out,
            relay_bytes=wire.bytes_in + wire.bytes_out,
            by_command=dict(calls.most_common()),
        )


@contextmanager
def cost_rig() -> Iterator[CostRig]:
    """A private redis-server, the two relays, and settings that reach it through the first."""
    server = EmbeddedRedis().start()
    measured = WireCounter("127.0.0.1", server.port).start()
    polls = WireCounter("127.0.0.1", server.port).start()
    directory = Path(tempfile.mkdtemp(prefix="planloop-cost-"))
    run_id = f"cost{uuid.uuid4().hex[:8]}"
    settings = Settings(
        redis_url=measured.url(),
        key_prefix=run_id,
        queue=run_id,
        database_url=f"sqlite:///{directory / 'planloop.db'}",
        tool_modules=[BENCH_TOOLS],
        worker_concurrency=WORKER_THREADS,
    )
    control, poller = connect(server.url), connect(polls.url())
    try:
        yield CostRig(BenchEnv(settings, directory, control), measured, polls, poller)
    finally:
        control.close()
        poller.close()
        measured.stop()
        polls.stop()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def chain_plan(n: int) -> Plan:
    steps = [
        Step(id=f"s{i}", tool="bench.sleep", dependencies=[f"s{i - 1}"] if i else [])
        for i in range(n)
    ]
    return Plan(goal="redis cost: chain", steps=steps)


def wide_plan(n: int) -> Plan:
    root = Step(id="root", tool="bench.sleep")
    children = [Step(id=f"c{i}", tool="bench.sleep", dependencies=["root"]) for i in range(1, n)]
    return Plan(goal="redis cost: wide", steps=[root, *children])


def run_planloop(rig: CostRig, producer: Producer, case: str, plan: Plan, timeout_s: float) -> Cost:
    """Submit ``plan`` and poll its status (off the books) until the session ends."""
    session_key = Keys(rig.bench.settings.key_prefix).session
    rig.start()
    t0 = time.monotonic()
    sid = producer.submit(plan)
    while not SessionStatus(rig.poll(session_key(sid), "status") or "pending").ended:
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"the {case} session did not end within {timeout_s:g}s")
        time.sleep(POLL_S)
    cost = rig.stop(case, len(plan.steps), time.monotonic() - t0)
    record = producer.session(sid)
    if record.status != SessionStatus.COMPLETED:
        raise SystemExit(f"the {case} session ended {record.status.value}: {record.error}")
    return cost


def run_celery(
    rig: CostRig, sender: Celery, results: redis.Redis, case: str, n: int, chained: bool
) -> Cost:
    """Send ``n`` bare tasks, one after another's result (``chained``) or all at once."""
    queue = rig.bench.settings.queue
    done_list = f"{rig.bench.settings.key_prefix}:bare:done:{case}"

    def send(i: int) -> None:
        sender.send_task(SLEEP_TASK, args=[done_list, f"t{i}", 0], queue=queue)

    def await_result() -> None:
        if results.blpop([done_list], timeout=60) is None:
            raise TimeoutError(f"a {case} task's result did not arrive within 60s")

    rig.start()
    t0 = time.monotonic()
    if chained:
        for i in range(n):
            send(i)
            await_result()
    else:
        for i in range(n):
            send(i)
        for _ in range(n):
            await_result()
    return rig.stop(case, n, time.monotonic() - t0)


def measure(n: int) -> list[Cost]:
    costs: list[Cost] = []
    with cost_rig() as rig:
        bench = rig.bench
        with planloop_stack(bench, concurrency=WORKER_THREADS) as (_stack, producer):
            run_planloop(rig, producer, "warmup", chain_plan(WARMUP_STEPS), 120)
            costs.append(run_planloop(rig, producer, "planloop chain", chain_plan(n), 300))
            costs.append(run_planloop(rig, producer, "planloop wide", wide_plan(n), 300))
        sender = Celery("cost-driver", set_as_current=False)
        sender.conf.update(stock_celery_config(bench.settings))
        results = connect(bench.settings.redis_url)
        with bare_worker(bench, concurrency=WORKER_THREADS):
            run_celery(rig, sender, results, "warmup", WARMUP_STEPS, chained=True)
            costs.append(run_celery(rig, sender, results, "celery chain", n, chained=True))
            costs.append(run_celery(rig, sender, results, "celery wide", n, chained=False))
        results.close()
        sender.close()
    return costs


def print_report(n: int, costs: list[Cost]) -> None:
    per = [c.per_step() for c in costs]
    targets = {
        "commands": f"<= {TARGET_COMMANDS}",
        "round_trips": f"<= {TARGET_CHAIN_ROUND_TRIPS} (chain)",
        "kb": f"<= {TARGET_KB:g}",
    }
    labels = {"commands": "commands/step", "round_trips": "round trips/step", "kb": "KB/step"}
    rows = [[labels[m]] + [f"{p[m]:.2f}" for p in per] + [targets[m]] for m in labels]
    rows.append(["seconds"] + [f"{c.seconds:.2f}" for c in costs] + [""])
    rows.append(["relay KB/step (cross-check)"] + [
        f"{c.relay_bytes / c.steps / 1000:.2f}" for c in costs
    ] + [""])  # fmt: skip
    print_table(
        f"Redis cost per step, N={n} (private redis-server; 1 supervisor, 1 worker x "
        f"{WORKER_THREADS} threads)",
        ["per step", *(c.case for c in costs), "target"],
        rows,
    )
    chain, celery = costs[0], costs[2]
    top = list(chain.by_command.items())[:TOP_COMMANDS]
    print_table(
        f"Where a {chain.case} step's commands go (top {TOP_COMMANDS}, in-script calls "
        f"included), beside the same command in a {celery.case} step",
        ["command", f"{chain.case}/step", "share", f"{celery.case}/step"],
        [
            [
                name,
                f"{calls / chain.steps:.2f}",
                f"{calls / chain.commands:.0%}",
                f"{celery.by_command.get(name, 0) / celery.steps:.2f}",
            ]
            for name, calls in top
        ],
    )
    others = ", ".join(
        f"{name} {calls / celery.steps:.2f}" for name, calls in list(celery.by_command.items())[:8]
    )
    console.print(f"{celery.case} per step: {others}")
    for cost, p in zip(costs, per, strict=True):
        verdict = ""
        if cost.case.startswith("planloop"):
            ok = p["commands"] <= TARGET_COMMANDS and p["kb"] <= TARGET_KB
            if cost.case.endswith("chain"):
                ok = ok and p["round_trips"] <= TARGET_CHAIN_ROUND_TRIPS
            verdict = " (meets the targets)" if ok else " (misses the targets)"
        console.print(
            f"redis cost: {cost.case} commands={p['commands']:.2f} "
            f"round_trips={p['round_trips']:.2f} kb={p['kb']:.2f} per step{verdict}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=50, help="Steps per plan / tasks per side.")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args(argv)
    if args.n < 2:
        parser.error("-n must be at least 2 (the wide plan has a root and children)")
    costs = measure(args.n)
    if args.json:
        out = [{**asdict(c), "per_step": c.per_step()} for c in costs]
        print(json.dumps({"n": args.n, "costs": out}, indent=2))
    else:
        print_report(args.n, costs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
