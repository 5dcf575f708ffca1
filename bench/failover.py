"""Failover: SIGKILL the owning supervisor, time its successor, count completed steps re-run.

Run from the repo root: ``python bench/failover.py`` or ``python -m bench.failover``.

Two supervisors and one worker run with the default lease TTL and reclaim interval. A
session of independent ``bench.write`` steps runs; each kill SIGKILLs the supervisor that
holds the session's lease, starts a replacement (the next standby) and measures, from the
kill:

* takeover: the successor's lease acquisition (the session hash's epoch goes up);
* first dispatch (the headline figure): the first step attempt the successor dispatches,
  read from the ``dispatched_at`` it writes into the step hash at its new epoch.

A completed step counts as re-executed when its attempt number or start time changed after
the kill, or its effect was applied more than once.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import BenchEnv, bench_env, console, median, percentile, print_table, wait_for
from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.keys import Keys
from planloop.core.models import SessionOptions, StepState, StepStatus
from planloop.core.shards import shard_holder
from planloop.planner.plan import Plan, Step
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, local_stack

TARGET_S = 2.0
STEPS = 150
STEP_SECONDS = 0.1
CONCURRENCY = 2
STEPS_BETWEEN_KILLS = 3


@dataclass(frozen=True)
class Kill:
    """What one kill cost."""

    takeover_s: float
    dispatch_s: float
    completed_before: int


class Failover:
    """Runs sessions on a stack and kills their owners."""

    def __init__(self, bench: BenchEnv, stack: Stack) -> None:
        self.bench = bench
        self.stack = stack
        keys = Keys(bench.settings.key_prefix)
        self.keys = keys
        self.hot = HotState(bench.redis, keys)
        self.effects = SqlEffectLedger.from_settings(bench.settings)  # counts from the audit
        self.producer = Producer.from_settings(bench.settings)
        self.supervisors = [p for p in stack.processes if _is_supervisor(p)]
        self.sid = ""
        self.ids: list[str] = []
        # Per session: completed steps at each kill, to check after the end.
        self.snapshots: list[tuple[str, dict[str, StepState]]] = []

    def states(self) -> dict[str, StepState]:
        return self.hot.steps(self.sid, self.ids)

    def ensure_session(self) -> None:
        """A session with enough steps left for one more kill."""
        if self.sid:
            left = sum(1 for s in self.states().values() if s.status != StepStatus.COMPLETED)
            if left > 4 * STEPS_BETWEEN_KILLS:
                return
            self.producer.wait(self.sid, timeout_s=120)
        steps = [
            Step(
                id=f"w{i:03d}",
                tool="bench.write",
                params={"label": f"w{i}", "seconds": STEP_SECONDS},
            )
            for i in range(STEPS)
        ]
        plan = Plan(goal="failover benchmark", steps=steps)
        self.sid = self.producer.submit(plan, SessionOptions(concurrency=CONCURRENCY))
        self.ids = [s.id for s in steps]

    def owner(self) -> subprocess.Popen[bytes] | None:
        owner = self.hot.session(self.sid).owner
        shards = self.bench.settings.session_shards
        if shard_holder(self.bench.redis, self.keys, self.sid, shards) != owner:
            return None
        return next(
            (p for p in self.supervisors if p.poll() is None and f"-{p.pid}-" in owner), None
        )

    def standby_ready(self) -> bool:
        live = [p for p in self.supervisors if p.poll() is None]
        return len(live) == 2 and all("serving" in _log(self.stack, p) for p in live)

    def kill_once(self) -> Kill:
        # The standby first: on a loaded machine it may take longer to start than the
        # session has steps left.
        wait_for(self.standby_ready, 60, "a standby supervisor")
        self.ensure_session()
        floor = sum(1 for s in self.states().values() if s.status == StepStatus.COMPLETED)
        wait_for(
            lambda: (
                sum(1 for s in self.states().values() if s.status == StepStatus.COMPLETED)
                >= floor + STEPS_BETWEEN_KILLS
            ),
            60,
            "more steps to complete",
        )
        wait_for(lambda: self.owner() is not None, 30, "a live owner")
        victim = self.owner()
        assert victim is not None
        epoch = self.hot.session(self.sid).epoch
        killed_at = time.time()
        _kill(victim)
        done = {i: s for i, s in self.states().items() if s.status == StepStatus.COMPLETED}
        self.snapshots.append((self.sid, done))
        self.supervisors.append(self.stack.start_supervisor())
        takeover_at = 0.0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not takeover_at and self.hot.session(self.sid).epoch > epoch:
                takeover_at = time.time()
            dispatched = [s.dispatched_at for s in self.states().values() if s.epoch > epoch]
            if takeover_at and dispatched:
                return Kill(takeover_at - killed_at, min(dispatched) - killed_at, len(done))
            time.sleep(0.002)
        raise TimeoutError(f"no successor dispatched a step of {self.sid} within 60 s")

    def re_executed(self) -> int:
        """Completed-at-kill steps whose attempt or start changed, or whose effect repeated."""
        count = 0
        for sid, done in self.snapshots:
            self.producer.wait(sid, timeout_s=120)
            now = self.hot.steps(sid, list(done))
            for step_id, before in done.items():
                after = now[step_id]
                if (
                    after.attempt != before.attempt
                    or after.started_at != before.started_at
                    or self.effects.count(f"{sid}:{step_id}") != 1
                ):
                    count += 1
        return count


def _is_supervisor(proc: subprocess.Popen[bytes]) -> bool:
    return "supervisor" in " ".join(str(a) for a in proc.args)  # type: ignore[union-attr]


def _log(stack: Stack, proc: subprocess.Popen[bytes]) -> str:
    for path in stack.log_dir.glob("supervisor-*.log"):
        text = path.read_text(errors="replace")
        if f"-{proc.pid}-" in text:
            return text
    return ""


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="supervisor kills (default 10)")
    args = parser.parse_args(argv)
    audit = Path(tempfile.mkdtemp(prefix="planloop-failover-")) / "effects.jsonl"
    with bench_env("failover", effect_audit_path=str(audit)) as bench:
        settings = bench.settings
        console.print(
            f"lease TTL {settings.lease_ttl_s:g}s, reclaim every {settings.reclaim_interval_s:g}s, "
            f"{args.kills} kills of the owning supervisor (2 supervisors, 1 worker)"
        )
        log_dir = bench.directory / "logs"
        log_dir.mkdir()
        with local_stack(bench.env, workers=1, supervisors=2, log_dir=log_dir) as stack:
            run = Failover(bench, stack)
            kills = [run.kill_once() for _ in range(args.kills)]
            re_executed = run.re_executed()
    rows = [
        [str(i + 1), f"{k.takeover_s:.3f}", f"{k.dispatch_s:.3f}", str(k.completed_before)]
        for i, k in enumerate(kills)
    ]
    print_table(
        "failover per kill (seconds from SIGKILL)",
        ["kill", "takeover", "first dispatch", "completed before kill"],
        rows,
    )
    dispatch = [k.dispatch_s for k in kills]
    takeover = [k.takeover_s for k in kills]
    console.print(
        "first state change = the successor's first step dispatch at its new epoch "
        "(dispatched_at in the step hash); lease takeover (epoch bump): "
        f"median={median(takeover):.2f}s max={max(takeover):.2f}s"
    )
    print(
        f"failover: median={median(dispatch):.1f}s p95={percentile(dispatch, 95):.1f}s "
        f"max={max(dispatch):.1f}s over {len(kills)} kills; "
        f"completed steps re-executed: {re_executed} (targets <= {TARGET_S:g} s, 0)"
    )
    return 0 if re_executed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
