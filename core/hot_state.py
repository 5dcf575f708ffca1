"""Synchronous access to a session's hot state in Redis, for producers, workers and tests.

The supervisor has its own asyncio twin (``supervisor/io/redis_store.py``);
both use the key names in
:mod:`core.keys` and the scripts in :mod:`core.lua`.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from planloop.core.errors import SessionNotFoundError
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.lua import BreakerAllow, BreakerRecord, RecordOutcome, StartAttempt
from planloop.core.models import Event, SessionOptions, SessionRecord, StepState
from planloop.core.receipts import KOMBU_UNACKED, KOMBU_UNACKED_INDEX, Receipt
from planloop.core.redis_client import RedisAddress, sync_client

RETRY_CAP_S = 1.0  # longest wait between two tries of a command (connect with retry_s)


def connect(
    url: str | RedisAddress, *, retry_s: float = 0, connect_timeout_s: float | None = None
) -> redis.Redis:
    """A Redis client that answers ``str`` (of the master, for a sentinel address).

    With ``retry_s``, a command that meets a Redis fault (connection refused or dropped, a
    time-out, Redis loading its dump) is tried again with back-off (up to ``RETRY_CAP_S``
    apart) for about ``retry_s`` seconds before the fault is raised. ``connect_timeout_s``
    bounds each connection attempt (a host that drops packets otherwise holds a command for
    the system's TCP time-out, minutes).
    """
    if not retry_s:
        return sync_client(
            url,
            decode_responses=True,
            health_check_interval=30,
            socket_connect_timeout=connect_timeout_s,
        )
    retry = Retry(
        ExponentialBackoff(cap=RETRY_CAP_S, base=0.05), math.ceil(retry_s / RETRY_CAP_S) + 5
    )
    return sync_client(
        url,
        decode_responses=True,
        health_check_interval=30,
        retry=retry,
        socket_connect_timeout=connect_timeout_s,
    )


# Session hash field: the digest of the plan text (version 1) the producer validated under
# its input limits before storing it; a supervisor that reads the same text skips the
# limits' walk (planner.plan.load_stored_plan). Any other plan text is validated.
PLAN_CHECKED_FIELD = "plan_checked"


def plan_checked(fields: Mapping[str, str], plan_json: str) -> bool:
    """Whether ``plan_json`` is the text the producer validated (``PLAN_CHECKED_FIELD``)."""
    digest = fields.get(PLAN_CHECKED_FIELD)
    return bool(digest) and digest == blob_digest(plan_json)


def blob_digest(data: str) -> str:
    """The content address of a stored output."""
    return hashlib.sha256(data.encode()).hexdigest()


def dumps(value: Any) -> str:
    """Compact, stable JSON (the only wire format)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


class HotState:
    """Reads and writes of session state that do not need the session's lease."""

    def __init__(self, client: redis.Redis, keys: Keys, *, blob_ttl_s: float = 0.0) -> None:
        self.r = client
        self.keys = keys
        self.blob_ttl_s = blob_ttl_s  # hot copies of outputs expire (0: never); SQL keeps them
        self._start = StartAttempt.register(client)
        self._record = RecordOutcome.register(client)
        self._breaker_allow = BreakerAllow.register(client)
        self._breaker_record = BreakerRecord.register(client)

    # --- sessions -------------------------------------------------------------------------
    def create_session(
        self,
        sid: str,
        *,
        plan_json: str | None,
        goal: str,
        options: SessionOptions,
        constraints: list[str] | None = None,
        checked: bool = False,
        steps: Mapping[str, StepState] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> None:
        """Store a new session and hand it to the supervisors.

        With ``plan_json`` the plan is version 1; without it (a goal) the plan version is 0
        and the owning supervisor's planner writes version 1. Steps get their hashes when
        something happens to them: a step without one is pending. ``checked``: the caller
        validated ``plan_json`` under the input limits (noted as ``PLAN_CHECKED_FIELD``).
        ``steps``: states some steps start in (a fork's carried steps); ``fields``: more
        fields of the session hash (a fork's lineage).
        """
        k, now = self.keys, time.time()
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(
            k.session(sid),
            mapping={
                "status": "pending",
                "goal": goal,
                "plan_version": 1 if plan_json is not None else 0,
                "epoch": 0,
                "created_at": repr(now),
                "replans": 0,
                "options": options.model_dump_json(exclude_defaults=True),
                "deliberation": dumps({"constraints": constraints or []}),
            },
        )
        if fields:
            pipe.hset(k.session(sid), mapping=dict(fields))  # type: ignore[arg-type]
        for step_id, st in (steps or {}).items():
            pipe.hset(k.step(sid, step_id), mapping=st.to_fields())  # type: ignore[arg-type]
        if plan_json is not None:
            pipe.set(k.plan(sid, 1), plan_json)
            if checked:
                pipe.hset(k.session(sid), PLAN_CHECKED_FIELD, blob_digest(plan_json))
        pipe.xgroup_create(k.events(sid), EVENTS_GROUP, id="0", mkstream=True)
        pipe.zadd(k.sessions, {sid: now})
        pipe.sadd(k.active, sid)
        pipe.xadd(k.inbox, {"sid": sid})
        pipe.execute()

    def session(self, sid: str) -> SessionRecord:
        fields = cast(dict[str, str], self.r.hgetall(self.keys.session(sid)))
        if not fields:
            raise SessionNotFoundError(sid)
        return SessionRecord.readable(sid, fields)

    def session_ids(self, limit: int = 20) -> list[str]:
        """The newest sessions first."""
        return cast(list[str], self.r.zrevrange(self.keys.sessions, 0, limit - 1))

    def plan_json(self, sid: str, version: int) -> str | None:
        return cast(str | None, self.r.get(self.keys.plan(sid, version)))

    def steps(self, sid: str, step_ids: Iterable[str]) -> dict[str, StepState]:
        """The states of ``step_ids``; a step nothing has happened to yet is pending."""
        ids = list(step_ids)
        pipe = self.r.pipeline(transaction=False)
        for step_id in ids:
            pipe.hgetall(self.keys.step(sid, step_id))
        return {
            step_id: StepState.from_fields(fields) if fields else StepState()
            for step_id, fields in zip(ids, pipe.execute(), strict=True)
        }

    def output(self, ref: str) -> Any:
        """A stored step output by its content address (``None`` when gone: it expires after
        ``blob_ttl_s``, and the SQL record's attempt row keeps the durable copy)."""
        raw = cast(str | None, self.r.get(self.keys.blob(ref))) if ref else None
        return json.loads(raw) if raw is not None else None

    def blob_text(self, digest: str) -> str | None:
        """A stored value's JSON text by its content address (None when it is not in Redis)."""
        return cast(str | None, self.r.get(self.keys.blob(digest)))

    # --- events ---------------------------------------------------------------------------
    def append_event(self, sid: str, event: Event) -> str:
        return cast(str, self.r.xadd(self.keys.events(sid), event.to_fields()))  # type: ignore[arg-type]

    def events(self, sid: str, after: str = "-", count: int = 1000) -> list[tuple[str, Event]]:
        start = after if after == "-" else f"({after}"
        rows = cast(
            list[tuple[str, dict[str, str]]],
            self.r.xrange(self.keys.events(sid), min=start, count=count),
        )
        return [(entry_id, Event.from_fields(fields)) for entry_id, fields in rows]

    def progress(
        self, sid: str, after: str = "-", count: int = 1000
    ) -> list[tuple[str, dict[str, str]]]:
        start = after if after == "-" else f"({after}"
        return cast(
            list[tuple[str, dict[str, str]]],
            self.r.xrange(self.keys.progress(sid), min=start, count=count),
        )

    def recent_progress(self, sid: str, count: int = 100) -> list[tuple[str, dict[str, str]]]:
        """The newest ``count`` progress notes, oldest first."""
        rows = cast(
            list[tuple[str, dict[str, str]]],
            self.r.xrevrange(self.keys.progress(sid), count=count),
        )
        return rows[::-1]

    # --- attempts (workers) ---------------------------------------------------------------
    def start_attempt(
        self,
        sid: str,
        step_id: str,
        *,
        attempt: int,
        epoch: int,
        worker: str,
        tool: str = "",
        breaker: BreakerPolicy | None = None,
        receipt: Receipt | None = None,
    ) -> int:
        """Claim a dispatched attempt (and check its tool's breaker) in one round trip.

        A ``receipt`` goes back to the broker's unacked entries in the same call. Returns 1
        claimed, 3 as the breaker's half-open trial, 2 breaker open, 0 stale, -1 started.
        """
        cooldown = "" if breaker is None else breaker.cooldown_s
        unacked, index, tag = _receipt_args(receipt)
        return int(
            self._start(
                StartAttempt(
                    step_key=self.keys.step(sid, step_id),
                    breaker_key=self.keys.breaker(tool),
                    unacked_key=unacked,
                    unacked_index_key=index,
                    attempt=attempt,
                    epoch=epoch,
                    worker=worker,
                    started_at=repr(time.time()),
                    cooldown_s=cooldown,
                    delivery_tag=tag,
                    unacked_entry=receipt.entry if receipt and not receipt.held else "",
                )
            )
        )

    def record_outcome(
        self,
        sid: str,
        step_id: str,
        *,
        attempt: int,
        epoch: int,
        status: str,
        event: Event,
        output: Any = None,
        output_json: str | None = None,
        error: str = "",
        error_kind: str = "",
        tool: str = "",
        breaker: BreakerPolicy | None = None,
        tool_ok: bool | None = None,
        receipt: Receipt | None = None,
        finished_at: float | None = None,
    ) -> str | None:
        """Record an attempt's outcome, count it on the tool's breaker (unless ``tool_ok`` is
        None), append its event and delete the ``receipt``'s unacked entry (the ack),
        atomically; None when the attempt is stale (the ack happens all the same).

        ``finished_at`` is when the tool returned (default: now). ``output_json`` is the
        output already encoded (:func:`dumps`), so a big one is not encoded twice.
        """
        if output_json is None:
            output_json = dumps(output) if output is not None else ""
        blob = output_json
        ref = blob_digest(blob) if blob else ""
        event = event.model_copy(update={"payload": {**event.payload, "output_ref": ref}})
        flat: list[str] = []
        for name, value in event.to_fields().items():
            flat += [name, value]
        counted = breaker is not None and tool_ok is not None
        mode = ("ok" if tool_ok else "fail") if counted else ""
        window = breaker.window_s if breaker else 0
        threshold = breaker.failures if breaker else 0
        breaker_key = self.keys.breaker(tool)
        unacked, index, tag = _receipt_args(receipt)
        result = self._record(
            RecordOutcome(
                step_key=self.keys.step(sid, step_id),
                events_key=self.keys.events(sid),
                blob_key=self.keys.blob(ref),
                breaker_key=breaker_key,
                breaker_failures_key=self.keys.breaker_failures(tool),
                unacked_key=unacked,
                unacked_index_key=index,
                attempt=attempt,
                epoch=epoch,
                status=status,
                finished_at=repr(time.time() if finished_at is None else finished_at),
                error=error,
                error_kind=error_kind,
                output_ref=ref,
                blob=blob,
                breaker_mode=mode,
                window_s=window,
                threshold=threshold,
                failure_member=uuid.uuid4().hex,
                delivery_tag=tag,
                blob_ttl_s=max(0, math.ceil(self.blob_ttl_s)),
                event_fields=flat,
            )
        )
        return cast(str | None, result or None)

    # --- calls outside a step's claim (an agent step's tool calls) -----------------------
    def breaker_allows(self, tool: str, breaker: BreakerPolicy | None) -> bool:
        """Whether ``tool``'s breaker lets one call run now (an open one fails it fast)."""
        if breaker is None:
            return True
        state = self._breaker_allow(
            BreakerAllow(
                breaker_key=self.keys.breaker(tool),
                now=repr(time.time()),
                cooldown_s=breaker.cooldown_s,
            )
        )
        return bool(state != "open")

    def count_on_breaker(self, tool: str, breaker: BreakerPolicy | None, *, ok: bool) -> None:
        """Count one call's outcome on ``tool``'s breaker, as a step's outcome is counted."""
        if breaker is None:
            return
        key = self.keys.breaker(tool)
        self._breaker_record(
            BreakerRecord(
                breaker_key=key,
                breaker_failures_key=self.keys.breaker_failures(tool),
                now=repr(time.time()),
                ok="ok" if ok else "fail",
                window_s=breaker.window_s,
                threshold=breaker.failures,
                failure_member=uuid.uuid4().hex,
            )
        )

    def note_progress(self, sid: str, kind: str, fields: dict[str, str]) -> None:
        """A progress note for ``watch`` (the supervisor's format: kind, at, fields)."""
        data = {"kind": kind, "at": repr(time.time()), **fields}
        self.r.xadd(self.keys.progress(sid), data, maxlen=10_000, approximate=True)  # type: ignore[arg-type]


def _receipt_args(receipt: Receipt | None) -> tuple[str, str, str]:
    """The broker's unacked hash and index and the delivery tag, for a script; with no
    receipt, kombu's names and an empty tag (the script leaves the broker alone)."""
    if receipt is None:
        return KOMBU_UNACKED, KOMBU_UNACKED_INDEX, ""
    return receipt.unacked_key, receipt.index_key, receipt.tag


@dataclass(frozen=True)
class BreakerPolicy:
    """When a tool's circuit breaker opens and how long it stays open.

    Breakers are shared by every worker through Redis and checked and counted inside the
    worker's claim and record scripts. Closed: calls run. ``failures`` transient failures
    within ``window_s`` open it: calls fail fast with TOOL_UNAVAILABLE. After ``cooldown_s``
    one call runs as a half-open probe: its success closes the breaker, its failure opens it
    again.
    """

    failures: int = 5
    window_s: float = 30.0
    cooldown_s: float = 10.0


class RedisEffectCache:
    """Receipts of recorded effects in Redis, read before the SQL effect ledger.

    Only a cache (:class:`core.effects.SqlEffectLedger` holds the truth): a receipt is put
    here after its SQL row is committed, so whatever this cache answers is in the record too,
    and a lost, flushed or unreachable Redis only costs a SQL read.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys

    def get(self, idempotency_key: str) -> dict[str, Any] | None:
        try:
            stored = cast(str | None, self.r.hget(self.keys.effects, idempotency_key))
        except redis.RedisError:
            return None
        return cast(dict[str, Any], json.loads(stored)) if stored is not None else None

    def put(self, idempotency_key: str, receipt: dict[str, Any]) -> None:
        with suppress(redis.RedisError):
            self.r.hset(self.keys.effects, idempotency_key, dumps(receipt))
