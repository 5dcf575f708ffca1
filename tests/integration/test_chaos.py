"""Fault injection: supervisors and workers die or freeze at random moments; nothing is lost.

Seeded (``PLANLOOP_TEST_CHAOS_SEED``), so a failing run can be replayed. Each worker pool
(prefork, threads, solo) gets a stack of its own (two supervisors, two workers of that pool)
and a few runs of a 30-step DAG of ``bench.write`` steps; after each run the session must
have completed with every effect exactly once, every outcome recorded in SQL, one owner per
epoch and no lease left behind.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
from collections import Counter
from typing import Any

import pytest

from planloop.core.keys import EVENTS_GROUP
from planloop.core.models import EventType, SessionRecord, SessionStatus, StepStatus
from planloop.core.shards import shard_of
from planloop.planner.plan import Plan
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SEED = int(os.environ.get("PLANLOOP_TEST_CHAOS_SEED", "4242"))
RUNS = 2  # per pool: three pools take about the time six runs on one pool took
STEPS = 30
# Worker processes per pool: a solo worker runs one step at a time; prefork forks a child
# per slot (two, so two workers do not crowd the machine's cores).
POOLS = {"prefork": 2, "threads": 8, "solo": 1}
# How Celery's start-up banner names each pool (".> concurrency: 2 (prefork)").
BANNER = {"prefork": "prefork", "threads": "thread", "solo": "solo"}
KINDS = ("kill_supervisor", "kill_worker", "kill_both")


def chaos_plan(rng: random.Random, run: int) -> Plan:
    """30 write steps; each depends on up to two of the six steps before it."""
    steps: list[dict[str, Any]] = []
    for i in range(STEPS):
        window = range(max(0, i - 6), i)
        deps = sorted(rng.sample(window, k=min(len(window), rng.randint(0, 2))))
        steps.append(
            {
                "id": f"s{i:02d}",
                "tool": "bench.write",
                "params": {"label": f"run{run}-s{i}", "seconds": round(rng.uniform(0.05, 0.3), 3)},
                # Short, so a step whose worker died is retried soon (timeout + grace).
                "timeout_s": 2,
                "max_retries": 6,
                "dependencies": [f"s{d:02d}" for d in deps],
            }
        )
    return Plan.model_validate({"goal": f"chaos run {run}", "steps": steps})


def fault_schedule(rng: random.Random, run: int) -> list[tuple[int, str]]:
    """(completed steps before the fault, kind) pairs.

    Run 0 loses at least one worker alone (the pool under test); run 1 freezes its owner
    past the lease.
    """
    kinds = rng.choices(KINDS, k=2)
    if run == 0:
        kinds[0] = "kill_worker"
    elif run == 1:
        kinds[0] = "stop_supervisor"
    moments = sorted(rng.sample(range(2, STEPS - 4), k=len(kinds)))
    return list(zip(moments, kinds, strict=True))


class Chaos:
    """Runs sessions on ``ps`` and injects faults into its processes (workers of ``pool``)."""

    def __init__(self, ps: PrivateStack, rng: random.Random, pool: str) -> None:
        self.ps = ps
        self.rng = rng
        self.pool = pool
        self.survived: Counter[str] = Counter()
        self.runs = 0
        self.frozen: list[tuple[subprocess.Popen[bytes], str]] = []

    def tally(self) -> str:
        faults = sum(self.survived.values())
        detail = ", ".join(f"{k}={v}" for k, v in sorted(self.survived.items()))
        return f"{self.pool}: {self.runs} runs, {faults} faults survived ({detail}), seed={SEED}"

    def owner(self, sid: str) -> subprocess.Popen[bytes]:
        wait_for(lambda: self.ps.owner_process(sid) is not None, 20, f"a live owner of {sid}")
        proc = self.ps.owner_process(sid)
        assert proc is not None, f"the owner of {sid} vanished"
        return proc

    def inject(self, sid: str, kind: str) -> None:
        ps = self.ps
        if kind in ("kill_supervisor", "kill_both"):
            ps.signal(self.owner(sid), signal.SIGKILL)
            ps.start_supervisor()
        if kind in ("kill_worker", "kill_both"):
            victim = self.rng.choice([w for w in ps.workers if w.poll() is None])
            ps.signal(victim, signal.SIGKILL)
            ps.start_worker(POOLS[self.pool], self.pool)
        if kind == "stop_supervisor":
            frozen = self.owner(sid)
            epoch = ps.hot.session(sid).epoch
            ps.signal(frozen, signal.SIGSTOP)
            # Frozen past its lease: a peer takes the session at the next epoch.
            wait_for(lambda: ps.hot.session(sid).epoch > epoch, 20, "a peer to take over")
            ps.signal(frozen, signal.SIGCONT)
            self.frozen.append((frozen, sid))
        self.survived[kind] += 1

    def run(self, run: int) -> None:
        ps = self.ps
        plan = chaos_plan(self.rng, run)
        ids = [s.id for s in plan.steps]
        sid = ps.producer.submit(plan)
        for moment, kind in fault_schedule(self.rng, run):
            wait_for(
                lambda n=moment: (
                    len(ps.completed(sid, ids)) >= n  # type: ignore[misc]
                    or ps.hot.session(sid).status.ended
                ),
                60,
                f"{moment} steps of {sid} to complete",
            )
            if ps.hot.session(sid).status.ended:
                break
            self.inject(sid, kind)
        record = ps.finish(sid, ids, 90, f"run {run} after {self.tally()}")
        check_run(ps, sid, ids, record, f"run {run} ({sid}) after {self.tally()}")
        for proc, frozen_sid in self.frozen:
            if frozen_sid == sid:
                wait_for(
                    lambda p=proc: stood_down(ps, p, sid),  # type: ignore[misc]
                    10,
                    f"the frozen supervisor to notice it lost {sid}",
                )
        self.runs += 1


def stood_down(ps: PrivateStack, proc: subprocess.Popen[bytes], sid: str) -> bool:
    text = ps.supervisor_log(proc)
    # Woken, it learns from the lease keeper (its session's shard lease gone at renewal, the
    # loop stopped if still running) or from a fenced write; a loop that a Redis time-out
    # stopped first (its socket timed out while frozen) only gets the keeper's word about
    # the shard.
    shard = shard_of(sid, ps.settings.session_shards)
    return (
        f"session={sid} lease lost" in text
        or any(f"shard={shard} {said}" in text for said in ("lease lost", "lease gone"))
        or (f"session={sid} epoch=" in text and "fenced out" in text)
    )


def pool_banner(ps: PrivateStack, proc: subprocess.Popen[bytes]) -> str:
    """The pool a worker says it runs (its banner's concurrency line), '' until it has said."""
    log = ps.stack.log_dir / f"worker-{ps.stack.processes.index(proc)}.log"
    found = re.search(r"concurrency: \d+ \(\w+\)", log.read_text(errors="replace"))
    return found.group(0) if found else ""


def check_run(ps: PrivateStack, sid: str, ids: list[str], record: SessionRecord, ctx: str) -> None:
    """Everything a run must leave behind, whatever died during it."""
    assert record.status == SessionStatus.COMPLETED, f"{ctx}: ended {record.status}: {record.error}"
    # The end is recorded in SQL after Redis; acknowledgements and the lease release follow.
    wait_for(
        lambda: (row := ps.record.session(sid)) is not None and row.status == "completed",
        10,
        f"{ctx}: the SQL record of the end",
    )
    wait_for(lambda: not ps.redis.exists(ps.keys.lease(sid)), 10, f"{ctx}: the lease release")
    wait_for(
        lambda: not ps.redis.xpending_range(ps.keys.events(sid), EVENTS_GROUP, "-", "+", 10),
        10,
        f"{ctx}: no event left pending",
    )
    counts = {i: ps.effects.count(f"{sid}:{i}") for i in ids}
    assert all(c == 1 for c in counts.values()), f"{ctx}: effects not exactly once: {counts}"
    events = ps.record.events(sid)
    done_events = {e.step_id for e in events if e.type == EventType.TASK_COMPLETED.value}
    assert set(ids) <= done_events, f"{ctx}: completion events lost: {set(ids) - done_events}"
    attempts = ps.record.attempts(sid)
    done_rows = {a.step_id for a in attempts if a.status == StepStatus.COMPLETED.value}
    assert set(ids) <= done_rows, f"{ctx}: no completed attempt row for {set(ids) - done_rows}"
    owners = ps.takeovers(sid)
    shared = {e: names for e, names in owners.items() if len(names) != 1}
    assert not shared, f"{ctx}: epochs taken by more than one supervisor: {shared}"
    unknown = {a.epoch for a in attempts} - set(owners)
    assert not unknown, f"{ctx}: attempt rows written at epochs nobody took: {unknown}"
    assert ps.hot.session(sid).epoch == max(owners), f"{ctx}: {owners}"


@pytest.mark.timeout(200)
@pytest.mark.parametrize("pool", list(POOLS))
def test_sessions_survive_killed_and_frozen_processes(private_stack: MakeStack, pool: str) -> None:
    ps = private_stack(
        workers=0,
        supervisors=2,
        lease_ttl_s=1.0,
        watchdog_grace_s=0.5,
        retry_backoff_s=0.05,
    )
    for _ in range(2):
        ps.start_worker(POOLS[pool], pool)
    for worker in ps.workers:
        expected = f"concurrency: {POOLS[pool]} ({BANNER[pool]})"
        banner = wait_for(
            lambda w=worker: pool_banner(ps, w),  # type: ignore[misc]
            60,
            "the worker's start-up banner",
        )
        assert banner == expected, f"asked for --pool {pool}, the worker runs {banner!r}"
    chaos = Chaos(ps, random.Random(f"{SEED}-{pool}"), pool)

    for run in range(RUNS):
        chaos.run(run)

    print(f"\nchaos: {chaos.tally()}")
    assert chaos.runs == RUNS
    assert chaos.survived["stop_supervisor"] == 1, chaos.tally()
    assert sum(chaos.survived.values()) >= RUNS, chaos.tally()
