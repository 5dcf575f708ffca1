"""The supervisor's asyncio view of Redis: fenced writes, reads, event consumption."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import NoScriptError

from planloop.core.errors import FencedOutError
from planloop.core.hot_state import dumps
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.lua import (
    QUEUE,
    EndAttempt,
    FencedWrite,
    LoadStarts,
    Queued,
)
from planloop.core.models import Event, SessionRecord, SessionStatus, StepState
from planloop.core.redis_client import RedisAddress, async_client
from planloop.supervisor.io.redis_streams import RedisStreams
from planloop.supervisor.io.write_batch import WriteBatch

Op = list[Any]
CLIENT_RETRIES = 3  # quick retries of one call before a fault reaches the caller
MAX_CONNECTIONS = 512
CONNECTION_WAIT_S = 10.0  # a command waits this long for a free connection, then fails
PROGRESS_MAXLEN = 10_000  # progress notes kept per session (about; trimmed as Redis sees fit)


class SessionStore(RedisStreams):
    """Async Redis access for supervisors; every write of an owned session is fenced.

    The event streams and the inbox are read and acknowledged through :class:`RedisStreams`.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._fenced = FencedWrite.register_async(client)
        self._end_attempt = EndAttempt.register_async(client)
        self._queued = Queued.register_async(client)
        self._load_starts = LoadStarts.register_async(client)
        # The fenced writes of one loop turn (of any sessions) go in one pipeline: the first
        # dispatches of a batch of sessions starting together are one round trip.
        self._writes: WriteBatch[FencedWrite] = WriteBatch(self._send_writes)
        self._lengths: dict[str, tuple[float, int]] = {}  # queue -> (read at, length)
        self._reading_lengths: dict[str, asyncio.Future[int]] = {}

    @classmethod
    def from_url(cls, url: str | RedisAddress, keys: Keys) -> SessionStore:
        # A few quick retries absorb a dropped connection; a longer outage reaches the
        # supervisor's own back-off within a second, so the lease keeper notices it in time.
        retry = Retry(ExponentialWithJitterBackoff(base=0.02, cap=0.25), CLIENT_RETRIES)
        # A command waits for a free connection rather than failing: a thousand sessions
        # loading at once would otherwise stop on "Too many connections" and be taken again.
        client = async_client(
            url,
            decode_responses=True,
            max_connections=MAX_CONNECTIONS,
            timeout=CONNECTION_WAIT_S,
            retry=retry,
        )
        return cls(client, keys)

    # --- leases (taken by the lease keeper: supervisor/process/lease_keeper.py) -----------------
    async def load_plans(self, taken: Sequence[Taken]) -> None:
        """Read the plan version each of ``taken`` runs into it, make sure its events
        group exists (created again if Redis lost it) and count the events delivered and
        not acknowledged (a former consumer's, to take over): one call for all."""
        held = [t for t in taken if t.epoch and t.fields]
        if not held:
            return
        session_keys: list[str] = []
        for t in held:
            session_keys += [self.keys.plan(t.sid, t.plan_version), self.keys.events(t.sid)]
        call = LoadStarts(group=EVENTS_GROUP, session_keys=session_keys)
        replies = cast(list[Any], await self._load_starts(call))
        for t, plan, pending in zip(held, replies[::2], replies[1::2], strict=True):
            t.plan_json = cast(str | None, plan) if t.plan_version else None
            t.pending = int(pending or 0)

    async def active_sessions(self) -> list[str]:
        return sorted(cast(set[str], await self.r.smembers(self.keys.active)))

    async def scan_active(self, cursor: int, count: int) -> tuple[int, list[str]]:
        """One step of a pass over the active sessions (about ``count`` of them): the next
        cursor (0: the pass is over) and the ids found. An id active for the whole pass is
        found at least once in it."""
        at, found = await self.r.sscan(self.keys.active, cursor, count=count)
        return int(at), cast(list[str], found)

    # --- reads ----------------------------------------------------------------------------
    async def session(self, sid: str) -> SessionRecord | None:
        fields = cast(dict[str, str], await self.r.hgetall(self.keys.session(sid)))
        return SessionRecord.from_fields(sid, fields) if fields else None

    async def session_fields(self, sid: str) -> dict[str, str]:
        return cast(dict[str, str], await self.r.hgetall(self.keys.session(sid)))

    async def session_field(self, sid: str, name: str) -> str | None:
        """One field of the session hash (``status``, ``cancel_requested``)."""
        return cast(str | None, await self.r.hget(self.keys.session(sid), name))

    async def leave_active(self, sid: str) -> None:
        """Drop an ended session from the active set (unfenced: it is over either way)."""
        await self.r.srem(self.keys.active, sid)

    async def keep_blobs(self, needed: Mapping[str, Callable[[], str]], *, ttl_s: float) -> None:
        """Renew each digest's hot copy for ``ttl_s``; write back those that expired."""
        if not needed:
            return
        keys = {digest: self.keys.blob(digest) for digest in needed}
        ttl = math.ceil(ttl_s) if ttl_s > 0 else 0
        pipe = self.r.pipeline(transaction=False)
        for key in keys.values():
            if ttl:
                pipe.expire(key, ttl)
            else:
                pipe.exists(key)
        present = await pipe.execute()
        missing = [d for d, there in zip(keys, present, strict=True) if not there]
        if not missing:
            return
        pipe = self.r.pipeline(transaction=False)
        for digest in missing:
            pipe.set(keys[digest], needed[digest](), ex=ttl or None, nx=True)
        await pipe.execute()

    async def plan_json(self, sid: str, version: int) -> str | None:
        return cast(str | None, await self.r.get(self.keys.plan(sid, version)))

    async def steps(self, sid: str, step_ids: Iterable[str]) -> dict[str, StepState]:
        ids = list(step_ids)
        pipe = self.r.pipeline(transaction=False)
        for step_id in ids:
            pipe.hgetall(self.keys.step(sid, step_id))
        rows = await pipe.execute()
        # a step nothing has happened to yet has no hash: pending (as HotState.steps says)
        return {
            i: StepState.from_fields(f) if f else StepState()
            for i, f in zip(ids, rows, strict=True)
        }

    async def step(self, sid: str, step_id: str) -> StepState | None:
        fields = cast(dict[str, str], await self.r.hgetall(self.keys.step(sid, step_id)))
        return StepState.from_fields(fields) if fields else None

    async def outputs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[Any]:
        """Stored outputs by content address (None where the hot copy expired)."""
        return [
            json.loads(value) if value is not None else None
            for value in await self.blobs(refs, ttl_s=ttl_s)
        ]

    async def blobs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[str | None]:
        """Stored outputs as their JSON text; a read keeps the hot copy for ``ttl_s`` more
        (GETEX, in the same round trip), as long as it is in use."""
        if not refs:
            return []
        keys = [self.keys.blob(ref) for ref in refs]
        if ttl_s <= 0:
            return cast(list[str | None], await self.r.mget(keys))
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            pipe.getex(key, ex=math.ceil(ttl_s))
        return cast(list[str | None], await pipe.execute())

    # --- the step queue -------------------------------------------------------------------
    async def queue_length(self, queue: str, *, max_age_s: float = 0.0) -> int:
        """Messages waiting in a Celery queue (kombu's Redis list named after it).

        A length read less than ``max_age_s`` ago is answered from memory, and sessions
        asking while a read is in flight share it: every session of the process watches
        the same queue, so a thousand of them cost one LLEN per ``max_age_s``, not a
        thousand.
        """
        cached = self._lengths.get(queue)
        if cached is not None and time.monotonic() - cached[0] <= max_age_s:
            return cached[1]
        reading = self._reading_lengths.get(queue)
        if reading is None:
            reading = asyncio.ensure_future(self.r.llen(queue))
            self._reading_lengths[queue] = reading
            reading.add_done_callback(lambda done: self._read_length(queue, done))
        length = int(await asyncio.shield(reading))
        self._lengths[queue] = (time.monotonic(), length)
        return length

    def _read_length(self, queue: str, done: asyncio.Future[int]) -> None:
        self._reading_lengths.pop(queue, None)
        if not done.cancelled():
            done.exception()  # retrieved: every session that asked may have gone meanwhile

    async def queued(self, queue: str, task_id: str) -> bool:
        """Whether a message of task ``task_id`` still waits in ``queue``."""
        needle = f'"id": {json.dumps(task_id)}'  # as kombu's JSON spells the header
        return bool(await self._queued(Queued(queue_key=queue, needle=needle)))

    # --- fenced writes --------------------------------------------------------------------
    async def write(
        self, sid: str, epoch: int, ops: Sequence[tuple[str, str, Sequence[Any]]]
    ) -> None:
        """Run ``ops`` (command, key, args) atomically while ``epoch`` owns the session."""
        if not ops:
            return
        if not await self._writes.run(self._fenced_call(sid, epoch, ops)):
            raise FencedOutError(sid, epoch)

    def _fenced_call(
        self, sid: str, epoch: int, ops: Sequence[tuple[str, str, Sequence[Any]]]
    ) -> FencedWrite:
        targets: dict[str, int] = {}  # key -> its 1-based index in target_keys
        messages: list[str] = []  # QUEUE's messages, ARGVs of their own (not escaped in ops)
        encoded: list[Op] = []
        for command, key, args in ops:
            index = targets.setdefault(key, len(targets) + 1)
            texts: list[Any] = [arg_text(a) for a in args]
            if command == QUEUE:  # [message, unacked hash, tag, tail]: the hash is a target
                messages.append(texts[0])
                texts[0] = len(messages)
                texts[1] = targets.setdefault(texts[1], len(targets) + 1)
            encoded.append([command, index, *texts])
        return FencedWrite(
            session_key=self.keys.session(sid),
            epoch=epoch,
            ops=json.dumps(encoded),
            target_keys=list(targets),
            messages=messages,
        )

    async def _send_writes(self, calls: Sequence[FencedWrite]) -> list[Any]:
        """Fenced writes in one round trip; per call, its reply or the error it got."""
        if len(calls) == 1:  # no pipeline to build for one
            try:
                return [await self._fenced(calls[0])]
            except aioredis.ResponseError as exc:
                return [exc]
        replies = await self._evalsha(calls)
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:  # Redis lost its scripts (restarted, flushed): none of those ran
            await self.r.script_load(FencedWrite.source())
            for i, reply in zip(lost, await self._evalsha([calls[i] for i in lost]), strict=True):
                replies[i] = reply
        return replies

    async def _evalsha(self, calls: Sequence[FencedWrite]) -> list[Any]:
        """EVALSHA of each call in one pipeline. Straight, not through redis-py's script
        object: in a pipeline that asks SCRIPT EXISTS first, one more round trip per batch."""
        pipe = self.r.pipeline(transaction=False)
        sha = self._fenced.script.sha
        for call in calls:
            keys, args = call.keys_and_args()
            pipe.evalsha(sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))

    def step_write(self, sid: str, step_id: str, **fields: Any) -> tuple[str, str, list[Any]]:
        """An HSET op for :meth:`write`."""
        flat: list[Any] = []
        for name, value in fields.items():
            flat += [name, value]
        return ("HSET", self.keys.step(sid, step_id), flat)

    async def end_attempt(
        self, sid: str, epoch: int, step_id: str, attempt: int, *, status: str, event: Event
    ) -> str | None:
        """End a running attempt from the supervisor's side; None when it already ended."""
        flat: list[str] = []
        for name, value in event.to_fields().items():
            flat += [name, value]
        call = EndAttempt(
            session_key=self.keys.session(sid),
            step_key=self.keys.step(sid, step_id),
            events_key=self.keys.events(sid),
            epoch=epoch,
            attempt=attempt,
            status=status,
            error=event.description,
            error_kind=event.payload.get("error_kind", ""),
            finished_at=repr(time.time()),
            event_fields=flat,
        )
        return cast(str | None, await self._end_attempt(call) or None)

    async def append_event(self, sid: str, event: Event) -> str:
        return cast(str, await self.r.xadd(self.keys.events(sid), event.to_fields()))  # type: ignore[arg-type]

    async def note_progress(self, sid: str, kind: str, **fields: Any) -> None:
        """A note for ``watch`` (re-plans, session end); never needed for correctness."""
        data = {
            "kind": kind,
            "at": repr(time.time()),
            **{k: arg_text(v) for k, v in fields.items()},
        }
        await self.r.xadd(self.keys.progress(sid), data, maxlen=PROGRESS_MAXLEN, approximate=True)  # type: ignore[arg-type]

    def progress_op(self, sid: str, kind: str, **fields: Any) -> tuple[str, str, list[Any]]:
        """The XADD of :meth:`note_progress` as an op for :meth:`write`."""
        at = repr(time.time())
        flat: list[Any] = ["MAXLEN", "~", PROGRESS_MAXLEN, "*", "kind", kind, "at", at]
        for name, value in fields.items():
            flat += [name, arg_text(value)]  # encoded as note_progress encodes them
        return ("XADD", self.keys.progress(sid), flat)

    async def last_note(self, sid: str, kinds: Sequence[str]) -> dict[str, str] | None:
        """The newest of the session's last 100 progress notes of one of ``kinds``."""
        rows: Any = await self.r.xrevrange(self.keys.progress(sid), count=100)
        return next((fields for _, fields in rows if fields.get("kind") in kinds), None)


@dataclass
class Taken:
    """A session a supervisor tried to adopt (``ShardOwner.adopt``).

    ``epoch`` is 0 when it was not adopted; ``fields`` is the session hash as read right
    after the adoption (empty: no hot state), ``plan_json`` the version it runs, read by
    ``loaded`` (:meth:`SessionStore.load_plans` of the whole batch, awaited by each loop).
    """

    sid: str
    epoch: int
    fields: dict[str, str]
    plan_json: str | None = None
    pending: int | None = None  # events delivered, not acknowledged (None: not counted)
    loaded: Awaitable[None] | None = None

    @property
    def plan_version(self) -> int:
        return int(self.fields.get("plan_version") or 0)

    @property
    def ended(self) -> bool:
        status = self.fields.get("status")
        return status is not None and SessionStatus(status).ended


def arg_text(value: Any) -> str:
    """A value as the text a Redis command argument carries."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict | list):
        return dumps(value)
    if hasattr(value, "value"):
        return str(value.value)
    return str(value)
