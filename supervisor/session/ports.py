"""The ports one session loop writes through, and the small helpers every part of it uses."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from planloop.config.settings import Settings
from planloop.core.models import Event, EventType, Severity, StepStatus
from planloop.core.tools import ToolRegistry
from planloop.planner.plan import Step
from planloop.planner.react_step import REACT_TOOL
from planloop.supervisor.io.step_message import Op
from planloop.supervisor.io.store_port import Entry, SessionStorePort, WriteOp
from planloop.supervisor.session.state import SessionState

# The session hash field `planloop cancel` sets (with the reason): read before anything else.
CANCEL_FIELD = "cancel_requested"

# A parked wait on a store read directly (no event hub: unit tests), in ms.
DIRECT_WAIT_MS = 1_000

# Outputs the SQL record holds, by reference (the durable copies of expired hot ones).
StoredOutputs = Callable[[str, list[str]], Awaitable[dict[str, str]]]


def describe_error(exc: BaseException) -> str:
    """``exc`` as its type and message, without the raw values pydantic quotes."""
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)[:3]
        )
        return f"{type(exc).__name__}: {problems}"
    return f"{type(exc).__name__}: {exc}"[:500]


def read_event(fields: dict[str, str]) -> Event:
    """Parse one stream entry into an event; ValueError (with the cause) when it cannot be
    applied or recorded (the record refuses a time that is not a finite number)."""
    event = Event.from_fields(fields)
    if not math.isfinite(event.occurred_at):
        raise ValueError(f"occurred_at is not a finite number ({fields.get('occurred_at')!r})")
    return event


async def none_stored(sid: str, refs: list[str]) -> dict[str, str]:
    """No SQL record behind the store (unit tests): an expired output stays unknown."""
    return {}


class EventSource(Protocol):
    """Where a session's new events come from when not its own XREADGROUP (io/event_hub.py)."""

    async def read(self, sid: str, *, count: int, block_ms: int | None) -> list[Entry]: ...

    def claim_due(self, sid: str) -> bool:
        """Whether a former owner holds entries of ``sid``'s stream (found by the reader's
        slow sweep): the session then claims them (once per finding)."""
        ...


class SessionIO:
    """One owned session's state and the store it is written through, fenced by its epoch."""

    def __init__(
        self,
        state: SessionState,
        store: SessionStorePort,
        settings: Settings,
        tools: ToolRegistry,
        *,
        consumer: str,
        stored_outputs: StoredOutputs = none_stored,
        events: EventSource | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.settings = settings
        self.tools = tools
        self.consumer = consumer
        self.stored_outputs = stored_outputs
        self.events = events  # the supervisor's event hub; None: read the stream directly
        # Ops written with the next fenced write (the first dispatch, say) instead of a
        # round trip of their own.
        self._deferred: list[WriteOp] = []

    @property
    def sid(self) -> str:
        return self.state.sid

    @property
    def epoch(self) -> int:
        return self.state.epoch

    async def read_events(self, *, count: int, block_ms: int | None) -> list[Entry]:
        """New events on the session's stream, waiting up to ``block_ms`` for the first
        (None: until one arrives, parked on the event hub)."""
        if self.events is not None:
            return await self.events.read(self.sid, count=count, block_ms=block_ms)
        # Without the hub the store is read directly: a bounded wait, looked at again.
        block = DIRECT_WAIT_MS if block_ms is None else block_ms
        return await self.store.read_events(self.sid, self.consumer, count=count, block_ms=block)

    async def end_attempt(
        self,
        step_id: str,
        attempt: int,
        *,
        status: StepStatus,
        error_kind: str,
        description: str,
        severity: Severity = Severity.INFO,
        **payload: Any,
    ) -> None:
        """End a running attempt from our side (lost, cancelled, timed out).

        The TASK_INTERRUPTED event goes through the stream like a worker's; the worker's own
        late outcome for that attempt, if it ever comes, is dropped.
        """
        event = Event(
            type=EventType.TASK_INTERRUPTED,
            severity=severity,
            step_id=step_id,
            attempt=attempt,
            description=description,
            payload={"error_kind": error_kind, **payload},
        )
        await self.store.end_attempt(
            self.sid, self.epoch, step_id, attempt, status=status.value, event=event
        )

    async def load_outputs(self, step_ids: list[str], *, keep_hot: bool = True) -> None:
        """Fetch the stored outputs of completed steps not yet in memory.

        Redis holds the hot copies for ``blob_ttl_s``; one that expired is read from the
        SQL record's attempt row, the durable copy. ``keep_hot`` keeps the copies read for
        ``blob_ttl_s`` more (a GETEX each); without it they are read with one MGET, for a
        read after which the session no longer needs them (its report).
        """
        state = self.state
        wanted = [
            i
            for i in step_ids
            if i not in state.outputs and i in state.states and state.states[i].output_ref
        ]
        if not wanted:
            return
        refs = [state.states[i].output_ref for i in wanted]
        values = await self.store.outputs(refs, ttl_s=self.settings.blob_ttl_s if keep_hot else 0)
        state.outputs.update({i: v for i, v in zip(wanted, values, strict=True) if v is not None})
        expired = [ref for ref, value in zip(refs, values, strict=True) if value is None]
        if expired:
            stored = await self.stored_outputs(self.sid, expired)
            state.outputs.update(
                {
                    i: json.loads(stored[ref])
                    for i, ref in zip(wanted, refs, strict=True)
                    if ref in stored
                }
            )

    async def append_event(self, event: Event) -> None:
        """Append an event of the supervisor's own and record it with this batch."""
        entry_id = await self.store.append_event(self.sid, event)
        self.state.batch.events.append((entry_id, event))

    async def write(self, ops: Sequence[WriteOp]) -> None:
        """Run ``ops`` in one fenced write, after the session fields deferred so far."""
        await self.store.write(self.sid, self.epoch, self.take_deferred(ops))

    def take_deferred(self, ops: Sequence[WriteOp]) -> list[WriteOp]:
        """``ops`` after the ops deferred so far, which they now carry: what :meth:`write`
        sends."""
        deferred, self._deferred = self._deferred, []
        return [*deferred, *ops]

    def carry(self, ops: Sequence[WriteOp]) -> None:
        """Run ``ops`` with the next fenced write (before its own ops)."""
        self._deferred += ops

    def defer_session(self, *fields: Any) -> None:
        """Set fields (name, value, ...) of the session hash with the next fenced write."""
        self.carry([("HSET", self.store.keys.session(self.sid), list(fields))])

    async def flush(self) -> None:
        """Write the deferred ops now if no other write carried them."""
        if self._deferred:
            await self.write([])

    async def write_step(self, step_id: str, *, along: Sequence[Op] = (), **fields: Any) -> None:
        """Set fields of a step's hash (and run ``along`` in the same fenced write)."""
        self.state.dirty.add(step_id)
        await self.write([self.store.step_write(self.sid, step_id, **fields), *along])

    async def write_session(self, *fields: Any) -> None:
        """Set fields (name, value, name, value, ...) of the session hash, fenced."""
        await self.write([("HSET", self.store.keys.session(self.sid), list(fields))])

    def concurrency(self) -> int:
        return self.state.info.options.concurrency or self.settings.session_concurrency

    def max_retries(self, step: Step) -> int:
        return self.settings.default_max_retries if step.max_retries is None else step.max_retries

    def timeout(self, step: Step) -> float:
        if step.timeout_s is not None:
            return step.timeout_s
        if step.tool == REACT_TOOL:  # several model turns and tool calls
            return min(self.settings.react_step_timeout_s, self.settings.max_step_timeout_s)
        if step.tool in self.tools:
            spec_timeout = self.tools.get(step.tool).timeout_s
            if spec_timeout is not None:
                return spec_timeout
        return self.settings.default_step_timeout_s
