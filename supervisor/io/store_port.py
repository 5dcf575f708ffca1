"""The store port of the session loop: what one session's loop reads and writes.

``redis_store.py`` (``SessionStore``, Redis) is the real backend; ``MemorySessionStore``
(``memory_store.py``) is its in-memory twin, so the loop's decisions are unit tested without
Redis. Both take the same ``(command, key, args)`` ops in :meth:`write`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from planloop.core.keys import Keys
from planloop.core.models import Event, SessionRecord, StepState

Entry = tuple[str, dict[str, str]]  # (stream entry id, its fields)
WriteOp = tuple[str, str, Sequence[Any]]  # (command, key, args) of a fenced write


class SessionStorePort(Protocol):
    """Hot state of owned sessions: every write is fenced by the owner's epoch."""

    keys: Keys

    # --- reads ----------------------------------------------------------------------------
    async def session(self, sid: str) -> SessionRecord | None: ...

    async def session_field(self, sid: str, name: str) -> str | None: ...

    async def session_fields(self, sid: str) -> dict[str, str]:
        """The session hash as stored, every field as text (empty: no hot state)."""

    async def plan_json(self, sid: str, version: int) -> str | None: ...

    async def steps(self, sid: str, step_ids: Iterable[str]) -> dict[str, StepState]: ...

    async def step(self, sid: str, step_id: str) -> StepState | None: ...

    async def outputs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[Any]: ...

    async def blobs(self, refs: Sequence[str], *, ttl_s: float = 0.0) -> list[str | None]: ...

    async def queued(self, queue: str, task_id: str) -> bool: ...

    async def queue_length(self, queue: str, *, max_age_s: float = 0.0) -> int: ...

    async def last_note(self, sid: str, kinds: Sequence[str]) -> dict[str, str] | None: ...

    # --- writes ---------------------------------------------------------------------------
    async def write(self, sid: str, epoch: int, ops: Sequence[WriteOp]) -> None: ...

    def step_write(self, sid: str, step_id: str, **fields: Any) -> tuple[str, str, list[Any]]: ...

    async def end_attempt(
        self, sid: str, epoch: int, step_id: str, attempt: int, *, status: str, event: Event
    ) -> str | None: ...

    async def append_event(self, sid: str, event: Event) -> str: ...

    async def note_progress(self, sid: str, kind: str, **fields: Any) -> None: ...

    def progress_op(self, sid: str, kind: str, **fields: Any) -> WriteOp:
        """:meth:`note_progress` as an op of a fenced :meth:`write` (noted with it)."""
        ...

    async def leave_active(self, sid: str) -> None: ...

    async def keep_blobs(self, needed: Mapping[str, Callable[[], str]], *, ttl_s: float) -> None:
        """Make sure each digest's stored copy exists for ``ttl_s`` more (written back from
        ``needed[digest]()`` if it expired)."""

    # --- events ---------------------------------------------------------------------------
    async def ensure_groups(self, sid: str) -> None: ...

    async def read_events(
        self, sid: str, consumer: str, *, count: int, block_ms: int | None
    ) -> list[Entry]:
        """Up to ``count`` new entries, waiting up to ``block_ms`` for the first; None: no
        wait at all (a look)."""

    async def claim_pending(
        self, sid: str, consumer: str, *, min_idle_ms: int = 0
    ) -> list[Entry]: ...

    async def delivery_counts(self, sid: str, entry_ids: Sequence[str]) -> dict[str, int]: ...

    async def ack_many(self, acks: Sequence[tuple[str, Sequence[str]]]) -> None: ...

    async def trim_events(self, sid: str, keep: int) -> int: ...

    async def dead_letter(
        self, sid: str, entries: Sequence[Entry], *, cause: str = "delivered too often"
    ) -> None: ...
