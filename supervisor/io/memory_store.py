"""An in-memory twin of the supervisor's Redis store (``SessionStorePort``), for unit tests.

It keeps hashes, strings, sets, lists and streams in dicts and runs the same fenced ``write``
ops as the Redis store (HSET, SET [NX], SADD, SREM, DEL, LPUSH, PUBLISH, XADD): a wrong epoch,
or a session that has ended, refuses the write with ``FencedOutError`` as the Lua script does.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from planloop.core.errors import FencedOutError
from planloop.core.keys import Keys
from planloop.core.lua import as_commands
from planloop.core.models import Event, SessionRecord, SessionStatus, StepState
from planloop.supervisor.io.redis_store import arg_text
from planloop.supervisor.io.store_port import Entry, WriteOp

ENDED = frozenset(s.value for s in SessionStatus if s.ended)


class MemorySessionStore:
    """``SessionStorePort`` over plain dicts; one consumer group per events stream."""

    def __init__(self, keys: Keys | None = None) -> None:
        self.keys = keys or Keys("test")
        self.hashes: dict[str, dict[str, str]] = {}
        self.strings: dict[str, str] = {}
        self.sets: dict[str, set[str]] = {}
        self.lists: dict[str, list[str]] = {}
        self.streams: dict[str, list[Entry]] = {}
        self.published: list[tuple[str, list[str]]] = []
        self.progress: list[tuple[str, str, dict[str, Any]]] = []  # (sid, kind, fields)
        self.dead: list[tuple[str, Entry, str]] = []  # (sid, entry, cause)
        self._delivered: dict[str, int] = {}  # per stream: entries handed out so far
        self._pending: dict[str, dict[str, int]] = {}  # per stream: entry id -> deliveries
        self._ids = itertools.count(1)
        self._progress_of: dict[str, str] = {}  # progress stream -> its session

    # --- set-up helpers for tests ---------------------------------------------------------
    def own(self, sid: str, epoch: int, **fields: Any) -> None:
        """Make ``epoch`` the owner of session ``sid`` (what the lease script does)."""
        self.hashes.setdefault(self.keys.session(sid), {}).update(
            {"epoch": str(epoch), **{k: arg_text(v) for k, v in fields.items()}}
        )

    def add_event(self, sid: str, event: Event) -> str:
        """A worker's event on the session's stream."""
        return self._xadd(self.keys.events(sid), event.to_fields())

    # --- reads ----------------------------------------------------------------------------
    async def session(self, sid: str) -> SessionRecord | None:
        fields = self.hashes.get(self.keys.session(sid))
        return SessionRecord.from_fields(sid, fields) if fields else None

    async def session_fields(self, sid: str) -> dict[str, str]:
        return dict(self.hashes.get(self.keys.session(sid), {}))

    async def session_field(self, sid: str, name: str) -> str | None:
        return self.hashes.get(self.keys.session(sid), {}).get(name)

    async def plan_json(self, sid: str, version: int) -> str | None:
        return self.strings.get(self.keys.plan(sid, version))

    async def steps(self, sid: str, step_ids: Iterable[str]) -> dict[str, StepState]:
        found = {i: self.hashes.get(self.keys.step(sid, i)) for i in step_ids}
        return {i: StepState.from_fields(f) if f else StepState() for i, f in found.items()}

    async def step(self, sid: str, step_id: str) -> StepState | None:
        fields = self.hashes.get(self.keys.step(sid, step_id))
        return StepState.from_fields(fields) if fields else None

    async def outputs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[Any]:
        values = [self.strings.get(self.keys.blob(ref)) for ref in refs]
        return [json.loads(v) if v is not None else None for v in values]

    async def blobs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[str | None]:
        return [self.strings.get(self.keys.blob(ref)) if ref else None for ref in refs]

    async def queue_length(self, queue: str, *, max_age_s: float = 0.0) -> int:
        return len(self.lists.get(queue, []))

    async def last_note(self, sid: str, kinds: Sequence[str]) -> dict[str, str] | None:
        notes = (n for n in reversed(self.progress[-100:]) if n[0] == sid and n[1] in kinds)
        return next(({"kind": kind, **fields} for _, kind, fields in notes), None)

    async def queued(self, queue: str, task_id: str) -> bool:
        needle = f'"id": {json.dumps(task_id)}'
        return any(needle in message for message in self.lists.get(queue, []))

    # --- writes ---------------------------------------------------------------------------
    async def write(self, sid: str, epoch: int, ops: Sequence[WriteOp]) -> None:
        if not ops:
            return
        session = self.hashes.get(self.keys.session(sid), {})
        if session.get("epoch") != str(epoch) or session.get("status") in ENDED:
            raise FencedOutError(sid, epoch)
        for command, key, args in ops:
            for plain, target, values in as_commands(command, key, args):
                self._run(plain, target, [arg_text(a) for a in values])

    def step_write(self, sid: str, step_id: str, **fields: Any) -> tuple[str, str, list[Any]]:
        flat: list[Any] = []
        for name, value in fields.items():
            flat += [name, value]
        return ("HSET", self.keys.step(sid, step_id), flat)

    async def end_attempt(
        self, sid: str, epoch: int, step_id: str, attempt: int, *, status: str, event: Event
    ) -> str | None:
        if self.hashes.get(self.keys.session(sid), {}).get("epoch") != str(epoch):
            return None
        step = self.hashes.get(self.keys.step(sid, step_id), {})
        if step.get("status") != "running" or step.get("attempt") != str(attempt):
            return None
        step.update(
            status=status,
            error=event.description,
            error_kind=str(event.payload.get("error_kind", "")),
            finished_at=repr(event.occurred_at),
        )
        return self._xadd(self.keys.events(sid), event.to_fields())

    async def append_event(self, sid: str, event: Event) -> str:
        return self._xadd(self.keys.events(sid), event.to_fields())

    async def note_progress(self, sid: str, kind: str, **fields: Any) -> None:
        # encoded as the Redis store encodes them: what ``watch`` reads is text
        self.progress.append((sid, kind, {k: arg_text(v) for k, v in fields.items()}))

    def progress_op(self, sid: str, kind: str, **fields: Any) -> tuple[str, str, list[Any]]:
        # An XADD to the session's progress stream, which :meth:`write` notes in ``progress``.
        stream = self.keys.progress(sid)
        self._progress_of[stream] = sid
        flat: list[Any] = ["*", "kind", kind]
        for name, value in fields.items():
            flat += [name, arg_text(value)]  # encoded as note_progress encodes them
        return ("XADD", stream, flat)

    async def leave_active(self, sid: str) -> None:
        self.sets.get(self.keys.active, set()).discard(sid)

    async def keep_blobs(self, needed: Mapping[str, Callable[[], str]], *, ttl_s: float) -> None:
        for digest, text in needed.items():  # no expiry here: only write back what is gone
            self.strings.setdefault(self.keys.blob(digest), text())

    # --- events ---------------------------------------------------------------------------
    async def ensure_groups(self, sid: str) -> None:
        self.streams.setdefault(self.keys.events(sid), [])

    async def read_events(
        self, sid: str, consumer: str, *, count: int, block_ms: int | None
    ) -> list[Entry]:
        stream = self.keys.events(sid)
        entries = self.streams.get(stream, [])
        start = self._delivered.get(stream, 0)
        taken = entries[start : start + count]
        self._delivered[stream] = start + len(taken)
        pending = self._pending.setdefault(stream, {})
        for entry_id, _ in taken:
            pending[entry_id] = pending.get(entry_id, 0) + 1
        return list(taken)

    async def claim_pending(self, sid: str, consumer: str, *, min_idle_ms: int = 0) -> list[Entry]:
        stream = self.keys.events(sid)
        pending = self._pending.get(stream, {})
        taken = [(e, f) for e, f in self.streams.get(stream, []) if e in pending]
        for entry_id, _ in taken:
            pending[entry_id] += 1
        return taken

    async def delivery_counts(self, sid: str, entry_ids: Sequence[str]) -> dict[str, int]:
        pending = self._pending.get(self.keys.events(sid), {})
        return {e: pending[e] for e in entry_ids if e in pending}

    async def dead_letter(
        self, sid: str, entries: Sequence[Entry], *, cause: str = "delivered too often"
    ) -> None:
        pending = self._pending.get(self.keys.events(sid), {})
        for entry in entries:
            self.dead.append((sid, entry, cause))
            pending.pop(entry[0], None)

    async def ack_many(self, acks: Sequence[tuple[str, Sequence[str]]]) -> None:
        for sid, entry_ids in acks:
            self.ack(sid, entry_ids)

    async def trim_events(self, sid: str, keep: int) -> int:
        """Drop the oldest entries past ``keep``, never a pending one (as XTRIM MINID does)."""
        stream = self.keys.events(sid)
        entries, pending = self.streams.get(stream, []), self._pending.get(stream, {})
        cut = max(len(entries) - keep, 0)
        cut = next((i for i, (e, _) in enumerate(entries[:cut]) if e in pending), cut)
        self.streams[stream] = entries[cut:]
        self._delivered[stream] = max(self._delivered.get(stream, 0) - cut, 0)
        return cut

    def ack(self, sid: str, entry_ids: Sequence[str]) -> None:
        pending = self._pending.get(self.keys.events(sid), {})
        for entry_id in entry_ids:
            pending.pop(entry_id, None)

    # --- the ops a fenced write runs ------------------------------------------------------
    def _run(self, command: str, key: str, args: list[str]) -> None:
        if command == "HSET":
            self.hashes.setdefault(key, {}).update(zip(args[::2], args[1::2], strict=True))
        elif command == "HDEL":
            for name in args:
                self.hashes.get(key, {}).pop(name, None)
        elif command == "SET":
            if "NX" not in args[1:] or key not in self.strings:
                self.strings[key] = args[0]
        elif command == "SADD":
            self.sets.setdefault(key, set()).update(args)
        elif command == "SREM":
            self.sets.setdefault(key, set()).difference_update(args)
        elif command == "DEL":
            for store in (self.hashes, self.strings, self.sets, self.lists):
                store.pop(key, None)
        elif command == "LPUSH":
            self.lists.setdefault(key, [])[:0] = reversed(args)
        elif command == "PUBLISH":
            self.published.append((key, args))
        elif command == "XADD":
            self._run_xadd(key, dict(zip(args[1::2], args[2::2], strict=True)))
        else:
            raise ValueError(f"memory store: command not supported: {command}")

    def _run_xadd(self, stream: str, fields: dict[str, str]) -> None:
        if stream in self._progress_of:  # a progress note written with a fenced write
            self.progress.append((self._progress_of[stream], fields.pop("kind"), fields))
        else:
            self._xadd(stream, fields)

    def _xadd(self, stream: str, fields: dict[str, str]) -> str:
        entry_id = f"{next(self._ids)}-0"
        self.streams.setdefault(stream, []).append((entry_id, dict(fields)))
        return entry_id
