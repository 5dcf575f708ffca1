"""The faults the soak injects, one method per kind, and what it remembers of each.

Every kind is one thing production does to a stack. A method returns
``False`` when the fault has no target right now (no owned session to freeze, no ended
session to re-announce); the soak then picks another kind.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.soak_stack import Fleet, SoakRedis
from planloop.config.settings import Settings
from planloop.core.keys import Keys
from planloop.core.models import Event, EventType, Severity
from planloop.core.record import SessionRow, SqlRecord
from planloop.core.shards import shard_holder

ENDED = ("completed", "failed", "aborted", "cancelled")

# Fault kind -> what it does (the soak's --help and table print these).
KINDS = {
    "kill_worker": "SIGKILL a worker (its process group); the bench starts another",
    "kill_supervisor": "SIGKILL a supervisor; the bench starts another",
    "stop_supervisor": "SIGSTOP the owner of a live session until a peer takes it, then SIGCONT",
    "client_kill": "CLIENT KILL TYPE normal: every client connection dropped",
    "restart_keep": "Redis restarted with its data (SHUTDOWN SAVE, start on the same port)",
    "restart_wipe": "Redis restarted without its data",
    "flushall": "FLUSHALL while a write step runs",
    "unreachable": "Redis down for 2-6 s (data kept), then started on the same port",
    "poison": "XADD an event with occurred_at=nan to a live session's stream",
    "reannounce": "XADD <inbox> * sid <ended sid>; its status, error and report must not change",
}
# Seconds a targeted fault looks for its target (a live, owned session; a running step).
TARGET_WAIT_S = 5.0
T = TypeVar("T")
# Kinds that take Redis's data away.
WIPES = ("restart_wipe", "flushall")


@dataclass(frozen=True)
class Injected:
    """One fault: its kind, when it began and ended (time.time()), and whom it targeted."""

    kind: str
    began: float
    ended: float
    target: str = ""  # a session id for targeted kinds


@dataclass(frozen=True)
class EndedSnapshot:
    """What an ended session looked like when the soak re-announced it."""

    sid: str
    status: str
    error: str
    report: str | None
    hot_status: str | None


@dataclass
class SubmittedSession:
    """A session the soak submitted: when, and the step ids of its plan."""

    sid: str
    at: float
    step_ids: list[str]


@dataclass
class Ledger:
    """What the soak knows beside Redis: sessions submitted, faults, losses it caused."""

    sessions: dict[str, SubmittedSession] = field(default_factory=dict)
    faults: list[Injected] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    # Sessions Redis lost before any supervisor recorded them in SQL (Redis was their only
    # copy, so they are gone by design): candidates noted just before each wipe.
    maybe_wiped: set[str] = field(default_factory=set)
    poisoned: set[str] = field(default_factory=set)
    reannounced: list[EndedSnapshot] = field(default_factory=list)
    # Held while a session is submitted and while a wipe notes the unclaimed sessions.
    submit_lock: threading.Lock = field(default_factory=threading.Lock)


def sql_sessions(record: SqlRecord) -> dict[str, tuple[str, float]]:
    """Every session row: id -> (status, finished_at)."""
    with Session(record.engine) as db:
        rows = db.execute(select(SessionRow.id, SessionRow.status, SessionRow.finished_at))
        return {sid: (status, finished) for sid, status, finished in rows}


class Faults:
    """Injects faults into one soak stack and writes what it did into the :class:`Ledger`."""

    def __init__(
        self,
        *,
        fleet: Fleet,
        redis_server: SoakRedis,
        record: SqlRecord,
        keys: Keys,
        ledger: Ledger,
        rng: random.Random,
        lease_ttl_s: float,
    ) -> None:
        self.fleet = fleet
        self.redis = redis_server
        self.r = redis_server.client
        self.record = record
        self.keys = keys
        self.shards = Settings().session_shards  # as the fleet reads it (PLANLOOP_*)
        self.ledger = ledger
        self.rng = rng
        self.lease_ttl_s = lease_ttl_s

    def inject(self, kind: str) -> bool:
        """Inject one fault of ``kind``; False when it had no target."""
        began = time.time()
        method = cast(Callable[[], str | None], getattr(self, kind))
        try:
            target = method()
        except redis.RedisError:
            target = None  # Redis was not there to be hurt (a previous fault still lingers)
        if target is None:
            self.ledger.skipped[kind] += 1
            return False
        self.ledger.faults.append(Injected(kind, began, time.time(), target))
        return True

    # --- processes ----------------------------------------------------------------------
    def kill_worker(self) -> str | None:
        workers = self.fleet.live("worker")
        if not workers:
            return None
        self.fleet.kill(self.rng.choice(workers))
        return ""

    def kill_supervisor(self) -> str | None:
        supervisors = self.fleet.live("supervisor")
        if not supervisors:
            return None
        self.fleet.kill(self.rng.choice(supervisors))
        return ""

    def stop_supervisor(self) -> str | None:
        """Freeze a live session's owner until its epoch moves on (or 4 lease TTLs pass)."""
        found = _within(TARGET_WAIT_S, self._owned_session)
        if found is None:
            return None
        sid, epoch, proc = found
        self.fleet.freeze(proc)
        try:
            deadline = time.monotonic() + 4 * self.lease_ttl_s + 2
            while time.monotonic() < deadline and self._epoch(sid) <= epoch:
                time.sleep(0.05)
            time.sleep(0.2)  # and a little past the takeover
        finally:
            self.fleet.thaw(proc)
        return sid

    def _owned_session(self) -> tuple[str, int, subprocess.Popen[bytes]] | None:
        """A live session, its epoch and the live supervisor holding its lease."""
        for sid in self._live_sessions():
            fields = cast(dict[str, str], self.r.hgetall(self.keys.session(sid)))
            pid = owner_pid(fields.get("owner", ""))
            proc = self.fleet.by_pid(pid) if pid else None
            holder = shard_holder(self.r, self.keys, sid, self.shards)
            if proc is not None and holder == fields.get("owner"):
                return sid, int(fields.get("epoch") or 0), proc
        return None

    # --- Redis --------------------------------------------------------------------------
    def client_kill(self) -> str | None:
        self.r.client_kill_filter(_type="normal")  # SKIPME yes: this connection stays
        return ""

    def restart_keep(self) -> str | None:
        self.redis.restart(keep_data=True)
        return ""

    def restart_wipe(self) -> str | None:
        with self.ledger.submit_lock:
            self._before_wipe()
            self.redis.restart(keep_data=False)
        return ""

    def flushall(self) -> str | None:
        """FLUSHALL once a write step is running (or after TARGET_WAIT_S of looking for one)."""
        running = _within(TARGET_WAIT_S, self._running_step) or ""
        with self.ledger.submit_lock:
            self._before_wipe()
            self.r.flushall()
        return running

    def unreachable(self) -> str | None:
        self.redis.shutdown_saving()
        try:
            time.sleep(self.rng.uniform(2, 6))
        finally:
            self.redis.start()
        return ""

    # --- input ----------------------------------------------------------------------------
    def poison(self) -> str | None:
        live = _within(TARGET_WAIT_S, self._live_sessions)
        if not live:
            return None
        sid = self.rng.choice(live)
        fields = Event(
            type=EventType.EXTERNAL_SIGNAL,
            severity=Severity.INFO,
            description="soak: an event whose time is not a number",
        ).to_fields()
        fields["occurred_at"] = "nan"
        self.r.xadd(self.keys.events(sid), fields)  # type: ignore[arg-type]
        self.ledger.poisoned.add(sid)
        return sid

    def reannounce(self) -> str | None:
        """Announce a session that ended at least 2 s ago again (each once), remembering its end."""
        now = time.time()
        done = {snapshot.sid for snapshot in self.ledger.reannounced}
        ended = [
            sid
            for sid, (status, finished) in sql_sessions(self.record).items()
            if status in ENDED
            and 0 < finished < now - 2
            and sid in self.ledger.sessions
            and sid not in done
        ]
        if not ended:
            return None
        sid = self.rng.choice(ended)
        row = self.record.session(sid)
        assert row is not None
        hot = cast(str | None, self.r.hget(self.keys.session(sid), "status"))
        snapshot = EndedSnapshot(sid, row.status, row.error, row.report, hot)
        self.r.xadd(self.keys.inbox, {"sid": sid})
        self.ledger.reannounced.append(snapshot)
        return sid

    # --- helpers --------------------------------------------------------------------------
    def _live_sessions(self) -> list[str]:
        """Submitted sessions the record does not show ended, oldest first."""
        rows = sql_sessions(self.record)
        return [
            sid
            for sid in self.ledger.sessions
            if sid in rows and rows[sid][0] not in ENDED and sid not in self.ledger.poisoned
        ]

    def _epoch(self, sid: str) -> int:
        return int(cast(str | None, self.r.hget(self.keys.session(sid), "epoch")) or 0)

    def _running_step(self) -> str:
        """``sid:step`` of a step the hot state shows running, '' when none."""
        for sid in self._live_sessions():
            pipe = self.r.pipeline(transaction=False)
            steps = self.ledger.sessions[sid].step_ids
            for step_id in steps:
                pipe.hget(self.keys.step(sid, step_id), "status")
            for step_id, status in zip(steps, pipe.execute(), strict=True):
                if status == "running":
                    return f"{sid}:{step_id}"
        return ""

    def _before_wipe(self) -> None:
        """Note the sessions only Redis knows (a wipe loses them before any supervisor claims)."""
        recorded = sql_sessions(self.record)
        self.ledger.maybe_wiped |= {sid for sid in self.ledger.sessions if sid not in recorded}


def _within(seconds: float, find: Callable[[], T | None]) -> T | None:
    """The first truthy answer of ``find`` polled for up to ``seconds`` (None without one)."""
    deadline = time.monotonic() + seconds
    while True:
        found = find()
        if found or time.monotonic() > deadline:
            return found or None
        time.sleep(0.05)


def owner_pid(owner: str) -> int:
    """The pid in a supervisor's name (``host-<pid>-<hex>``), 0 when there is none."""
    parts = owner.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 0


def audit_lines(text: str) -> list[dict[str, object]]:
    """The effect audit file's JSON lines (a line cut short by a kill is skipped)."""
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return lines
