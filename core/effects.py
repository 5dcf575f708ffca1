"""The durable effect ledger: each write tool's effect happens once per idempotency key, even
across a Redis loss.

``SqlEffectLedger.apply_once(key, make_receipt)``:

1. Ask the Redis cache (:class:`core.hot_state.RedisEffectCache`); a hit is a receipt already
   committed to SQL.
2. Ask the SQL ``effects`` table (:class:`core.record.EffectRow`); a row is returned (and
   put in the cache).
3. Claim the key: ``INSERT ... ON CONFLICT DO NOTHING`` in a transaction. The primary key
   decides the winner; a racer's insert waits on the winner's uncommitted row (PostgreSQL:
   the row; SQLite: the database's write lock) until that transaction ends.
4. The winner runs ``make_receipt`` (the effect), stores the receipt in its row and commits;
   only then is the receipt returned and the tool's outcome can count. A loser reads the
   committed receipt back. If ``make_receipt`` raises, the transaction rolls back and a later
   attempt may apply the effect.

Each call passes through the attempt's fence (core/effect_fence.py): an attempt whose
timeout passed is refused before step 1 (recorded as a late effect: a warning, a metric and
the audit file), and steps 3-4 run inside :meth:`AttemptFence.applying`, so an effect is
either refused or, already applying, commits under the step's key for the next attempt to
find and compensation to undo. One that commits after the fence closed is recorded in the
same transaction as a late effect (:class:`core.record.LateEffectRow`) and handed to
``on_late``, which settles it once the session has ended (workers/late_effects.py: undone
after the ending when the ending missed it). A database that refuses the write (disk
full, locked) raises :class:`core.errors.StoreWriteError`: an infrastructure fault the
supervisor retries once the store recovers, never the tool's failure.

The remaining window: a worker killed after the external effect happened and before its
transaction committed (the database rolls the claim back when the connection dies, and the
next attempt applies the effect again). For the bundled simulated tools the receipt *is* the
effect, so the window is empty for them; a tool that calls an outside system should pass it
the idempotency key too. On SQLite the effect runs holding the database's write lock, which
suits short effects (PostgreSQL locks only the one row).

:class:`EffectAudit` is a test and benchmark aid: an append-only JSON-lines file with one
line per application once committed, so duplicates are counted outside both Redis and SQL.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

from sqlalchemy import Table, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from planloop.config.settings import Settings
from planloop.core.effect_fence import AttemptFence
from planloop.core.errors import EffectNotRecordedError, LateEffectRefused, StoreWriteError
from planloop.core.metrics import count_late_effect
from planloop.core.record import EffectRow, LateEffectRow, make_engine
from planloop.core.tools import ToolContext

log = logging.getLogger(__name__)

EFFECTS = cast(Table, EffectRow.__table__)
LATE = cast(Table, LateEffectRow.__table__)
# Told of each effect that committed after its attempt's fence closed (its ledger row and
# receipt), once committed.
OnLate = Callable[[dict[str, Any], dict[str, Any]], None]


class ReceiptCache(Protocol):
    """A fast, lossy copy of committed receipts (Redis in the workers)."""

    def get(self, idempotency_key: str) -> dict[str, Any] | None: ...

    def put(self, idempotency_key: str, receipt: dict[str, Any]) -> None: ...


class EffectAudit:
    """One JSON line ``{"key", "tool", "pid", "at"}`` per real application of an effect.

    A test and benchmark aid (``PLANLOOP_EFFECT_AUDIT_PATH``): lines are appended with
    ``O_APPEND`` in one ``write`` each, which local filesystems keep whole across processes,
    so a key seen twice is an effect applied twice. A late effect the fence refused is a
    line with ``"refused": true``, which applied nothing and is not counted as applied.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def append(self, idempotency_key: str, tool: str, *, refused: bool = False) -> None:
        entry: dict[str, Any] = {
            "key": idempotency_key,
            "tool": tool,
            "pid": os.getpid(),
            "at": time.time(),
        }
        if refused:
            entry["refused"] = True
        line = json.dumps(entry)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)

    def counts(self) -> Counter[str]:
        """Applications per key."""
        return Counter(e["key"] for e in self._entries() if not e.get("refused"))

    def refusals(self) -> Counter[str]:
        """Late effects the fence refused, per key (each applied nothing)."""
        return Counter(e["key"] for e in self._entries() if e.get("refused"))

    def _entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def count(self, idempotency_key: str) -> int:
        return self.counts()[idempotency_key]

    def duplicates(self) -> dict[str, int]:
        """Keys applied more than once, with their counts."""
        return {key: n for key, n in self.counts().items() if n > 1}


# A receipt already made must reach SQL: retry a dropped connection for a while.
_retry_db = retry(
    retry=retry_if_exception_type(DBAPIError),
    wait=wait_exponential(multiplier=0.05, max=1.0),
    stop=stop_after_delay(10),
    reraise=True,
)


class SqlEffectLedger:
    """The :class:`core.tools.EffectLedger` of the workers: SQL rows, Redis in front.

    The engine is made on first use in each process (after a prefork pool forks), so one
    ledger may be built anywhere.
    """

    def __init__(
        self,
        database_url: str,
        *,
        cache: ReceiptCache | None = None,
        audit: EffectAudit | None = None,
        on_late: OnLate | None = None,
    ) -> None:
        self.database_url = database_url
        self.cache = cache
        self.audit = audit
        self.on_late = on_late
        self._engine: Engine | None = None
        self._pid = 0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls, settings: Settings, cache: ReceiptCache | None = None
    ) -> SqlEffectLedger:
        """The ledger on ``settings.database_url``, auditing to ``effect_audit_path`` if set."""
        path = settings.effect_audit_path
        return cls(settings.database_url, cache=cache, audit=EffectAudit(path) if path else None)

    @property
    def engine(self) -> Engine:
        """This process's engine (the table is created if missing)."""
        with self._lock:
            if self._engine is None or self._pid != os.getpid():
                engine = make_engine(self.database_url)
                _ensure_table(engine)
                self._engine, self._pid = engine, os.getpid()
            return self._engine

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None and self._pid == os.getpid():
                self._engine.dispose()
            self._engine = None

    def apply_once(
        self,
        idempotency_key: str,
        make_receipt: Callable[[], dict[str, Any]],
        ctx: ToolContext | None = None,
    ) -> dict[str, Any]:
        """Run ``make_receipt`` once per key and return the first receipt ever recorded.

        Raises:
            LateEffectRefused: ``ctx``'s attempt timed out before the effect was applied.
            StoreWriteError: the database refused the ledger's read or write.
        """
        fence = ctx.fence if ctx is not None else AttemptFence()
        try:
            fence.admit(idempotency_key)
            cached = self.cache.get(idempotency_key) if self.cache else None
            if cached is not None:
                return cached
            known = self.receipt(idempotency_key)
            if known is None:
                known = self._claim_and_apply(idempotency_key, make_receipt, ctx, fence)
        except LateEffectRefused:
            self._refused(idempotency_key, ctx)
            raise
        except DBAPIError as exc:
            raise StoreWriteError(idempotency_key, _cause(exc)) from exc
        if self.cache:
            self.cache.put(idempotency_key, known)  # after the commit: the cache never leads
        return known

    def _refused(self, key: str, ctx: ToolContext | None) -> None:
        """Record a late effect the fence refused: it applied nothing."""
        tool = ctx.tool if ctx else ""
        log.warning(
            "session=%s step=%s attempt=%d effect=%s refused: the attempt timed out first",
            ctx.session_id if ctx else "",
            ctx.step_id if ctx else "",
            ctx.attempt if ctx else 0,
            key,
        )
        count_late_effect(tool, "refused")
        if self.audit is not None:
            self.audit.append(key, tool, refused=True)

    def receipt(self, idempotency_key: str) -> dict[str, Any] | None:
        """The committed receipt of ``idempotency_key``, if any."""
        with self.engine.connect() as conn:
            stored = conn.execute(
                select(EFFECTS.c.receipt).where(EFFECTS.c.idempotency_key == idempotency_key)
            ).scalar_one_or_none()
        return cast(dict[str, Any], json.loads(stored)) if stored is not None else None

    def count(self, idempotency_key: str) -> int:
        """Times the effect was applied: from the audit file when there is one, else 1 when
        SQL holds its receipt (which cannot tell a duplicate).

        The audit line follows the commit, so a worker killed between the two leaves a
        committed effect without its line: SQL's receipt counts it once.
        """
        audited = self.audit.count(idempotency_key) if self.audit is not None else 0
        return audited or int(self.receipt(idempotency_key) is not None)

    def _claim_and_apply(
        self,
        key: str,
        make_receipt: Callable[[], dict[str, Any]],
        ctx: ToolContext | None,
        fence: AttemptFence,
    ) -> dict[str, Any]:
        row = _row(key, ctx)
        made: dict[str, Any] | None = None
        late = False
        try:
            with self.engine.connect() as conn, conn.begin() as claim:
                # the insert waits while a racer's claim is uncommitted
                if _insert_ignore(conn, row):
                    # refused here once the attempt timed out: the claim rolls back
                    with fence.applying(key):
                        made = make_receipt()
                        conn.execute(
                            update(EFFECTS)
                            .where(EFFECTS.c.idempotency_key == key)
                            .values(receipt=json.dumps(made), created_at=time.time())
                        )
                        late = fence.closed  # recorded with the effect: neither without
                        if late:
                            _insert_late(conn, row)
                        claim.commit()  # inside the fence: a late one is counted below
                        self._note_late(fence, key, row)
            if made is not None:
                # Audited once committed: a worker killed before the commit applied nothing
                # (the receipt is the bundled tools' effect), and the next attempt applies it.
                self._audit(key, row["tool"])
                if late and self.on_late is not None:
                    self.on_late(row, made)  # settled once its session has ended
                return made  # committed: the first receipt of this key
        except DBAPIError:
            if made is None:
                raise
            # The effect happened but its commit failed: record it in a new transaction.
            log.warning(
                "session=%s step=%s effect=%s receipt not committed: recording it again",
                row["session_id"],
                row["step_id"],
                key,
            )
            self._record_made(row, made)
            self._audit(key, row["tool"])
        stored = self.receipt(key)  # a racer's, or ours once recorded again
        if stored is None:
            raise EffectNotRecordedError(key)
        return stored

    @staticmethod
    def _note_late(fence: AttemptFence, key: str, row: dict[str, Any]) -> None:
        """An effect committed after its attempt's timeout: it was already applying, so it
        stands (recorded against the step; the next attempt finds it, compensation undoes
        it)."""
        if fence.closed:
            log.warning(
                "session=%s step=%s attempt=%d effect=%s committed after the attempt timed "
                "out: the step's next attempt reuses it, compensation undoes it",
                row["session_id"],
                row["step_id"],
                row["attempt"],
                key,
            )
            count_late_effect(row["tool"], "committed")

    def _audit(self, key: str, tool: str) -> None:
        if self.audit is not None:
            self.audit.append(key, tool)

    @_retry_db
    def _record_made(self, row: dict[str, Any], receipt: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            _insert_ignore(conn, {**row, "receipt": json.dumps(receipt)})


def _row(key: str, ctx: ToolContext | None) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "session_id": ctx.session_id if ctx else "",
        "step_id": ctx.step_id if ctx else "",
        "attempt": ctx.attempt if ctx else 0,
        "tool": ctx.tool if ctx else "",
        "receipt": None,
        "created_at": time.time(),
    }


def _cause(exc: DBAPIError) -> str:
    """The database's own words, on one line (``database or disk is full``)."""
    return " ".join(str(exc.orig or exc).split())[:200]


def _insert_ignore(conn: Connection, row: dict[str, Any]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; True when this row went in."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = insert(EFFECTS).values(**row).on_conflict_do_nothing()
    # RETURNING, not rowcount: psycopg answers -1 for a rowcount here.
    return conn.execute(statement.returning(EFFECTS.c.idempotency_key)).first() is not None


def _insert_late(conn: Connection, row: dict[str, Any]) -> None:
    """Record the effect of ``row`` as late (pending: settled once its session has ended)."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    fields = {k: row[k] for k in ("idempotency_key", "session_id", "step_id", "attempt", "tool")}
    late = {**fields, "committed_at": time.time(), "status": "pending"}
    late |= {"compensation_tool": "", "settled_by": "", "settled_at": 0.0, "error": ""}
    conn.execute(insert(LATE).values(**late).on_conflict_do_nothing())


def _ensure_table(engine: Engine) -> None:
    """Create the ``effects`` and ``late_effects`` tables if missing; another process
    creating them at the same time (PostgreSQL answers with a duplicate-type error) is
    fine."""
    for table in (EFFECTS, LATE):
        try:
            table.create(engine, checkfirst=True)
        except DBAPIError:
            with engine.connect() as conn:
                if not engine.dialect.has_table(conn, table.name):
                    raise
