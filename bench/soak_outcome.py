"""What a soak run counts once it has drained: statuses, stuck sessions, duplicate effects
(from the effect audit), lost events."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import astuple, dataclass
from pathlib import Path

import redis

from bench.soak_faults import ENDED, Ledger, audit_lines, sql_sessions
from planloop.core.keys import Keys
from planloop.core.models import EventType
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan


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
