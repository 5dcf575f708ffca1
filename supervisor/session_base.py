"""The state one session loop keeps, and the small helpers every part of the loop uses."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from core.models import (
    Event,
    EventType,
    SessionRecord,
    SessionStatus,
    Severity,
    StepState,
    StepStatus,
)
from core.record import Checkpoint
from planner.plan import Plan, Step
from supervisor.candidates import Candidates
from supervisor.context import SupervisorContext
from supervisor.dispatch import Op

FINAL = "final"
# The session hash field `planloop cancel` sets (with the reason): read before anything else.
CANCEL_FIELD = "cancel_requested"


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


def has_ended(st: StepState) -> bool:
    """True when nothing more will happen to the step in this plan version."""
    if st.status in (StepStatus.COMPLETED, StepStatus.SKIPPED, StepStatus.CANCELLED):
        return True
    return st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note == FINAL


class SessionBase:
    """One owned session's state: plan version, step states, what to checkpoint next."""

    def __init__(self, ctx: SupervisorContext, sid: str, epoch: int) -> None:
        self.ctx = ctx
        self.sid = sid
        self.epoch = epoch
        self.store = ctx.store
        self.settings = ctx.settings
        self.info = SessionRecord(id=sid)
        self.plan = Plan(steps=[Step(id="_", tool="_")])
        self.steps: dict[str, Step] = {}
        self.states: dict[str, StepState] = {}
        self.outputs: dict[str, Any] = {}
        self.down_tools: set[str] = set()
        self.batch = Checkpoint()
        self.dirty: set[str] = set()
        self.acks: list[str] = []
        self.outcome: tuple[SessionStatus, str] | None = None
        # Scheduling indexes, so one loop turn costs what changed, not the plan's size.
        self._order: dict[str, int] = {}
        self._dependents: dict[str, list[str]] = {}
        self._candidates = Candidates(self._order)  # may be dispatchable; re-checked on use
        self._inflight: set[str] = set()  # dispatched by us; pruned lazily
        self._backing_off: set[str] = set()  # READY, waiting for a retry's back-off
        self.approved: set[str] = set()  # steps a person approved (requires_approval)
        self._awaiting_approval: set[str] = set()  # found waiting, not yet announced
        self._announced: set[str] = set()
        self._next_sweep = 0.0  # when the watchdog looks at the steps in flight next

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

    async def _decide_failure(self, step_id: str) -> None:
        """Settle a failed attempt (the session loop's job)."""
        raise NotImplementedError

    def _use_plan(self, plan: Plan) -> None:
        self.plan = plan
        self.steps = {s.id: s for s in plan.steps}
        self._order = {s.id: i for i, s in enumerate(plan.steps)}
        self._dependents = {s.id: [] for s in plan.steps}
        for step in plan.steps:
            for dep in step.dependencies:
                self._dependents.setdefault(dep, []).append(step.id)

    def _reindex(self) -> None:
        """Rebuild the scheduling indexes from the step states (after load or re-plan)."""
        open_ = (StepStatus.PENDING, StepStatus.READY)
        self._candidates = Candidates(
            self._order, (i for i, st in self.states.items() if st.status in open_)
        )
        self._inflight = {i for i, st in self.states.items() if st.status == StepStatus.RUNNING}
        self._backing_off = {i for i, st in self.states.items() if st.status == StepStatus.READY}

    def _running(self) -> int:
        self._inflight = {
            i
            for i in self._inflight
            if i in self.states and self.states[i].status == StepStatus.RUNNING
        }
        return len(self._inflight)

    async def load_outputs(self, step_ids: list[str]) -> None:
        """Fetch the stored outputs of completed steps not yet in memory.

        Redis holds the hot copies for ``blob_ttl_s``; one that expired is read from the
        SQL record's attempt row, the durable copy.
        """
        wanted = [
            i
            for i in step_ids
            if i not in self.outputs and i in self.states and self.states[i].output_ref
        ]
        if not wanted:
            return
        refs = [self.states[i].output_ref for i in wanted]
        values = await self.store.outputs(refs, ttl_s=self.settings.blob_ttl_s)
        self.outputs.update({i: v for i, v in zip(wanted, values, strict=True) if v is not None})
        expired = [ref for ref, value in zip(refs, values, strict=True) if value is None]
        if expired:
            stored = await self.ctx.sql(lambda: self.ctx.record.outputs(self.sid, expired))
            self.outputs.update(
                {
                    i: json.loads(stored[ref])
                    for i, ref in zip(wanted, refs, strict=True)
                    if ref in stored
                }
            )

    async def append_event(self, event: Event) -> None:
        """Append an event of the supervisor's own and record it with this batch."""
        entry_id = await self.store.append_event(self.sid, event)
        self.batch.events.append((entry_id, event))

    async def _write_step(self, step_id: str, *, along: Sequence[Op] = (), **fields: Any) -> None:
        """Set fields of a step's hash (and run ``along`` in the same fenced write)."""
        self.dirty.add(step_id)
        await self.store.write(
            self.sid, self.epoch, [self.store.step_write(self.sid, step_id, **fields), *along]
        )

    def _concurrency(self) -> int:
        return self.info.options.concurrency or self.settings.session_concurrency

    def _max_retries(self, step: Step) -> int:
        return self.settings.default_max_retries if step.max_retries is None else step.max_retries

    def timeout(self, step: Step) -> float:
        if step.timeout_s is not None:
            return step.timeout_s
        if step.tool in self.ctx.tools:
            spec_timeout = self.ctx.tools.get(step.tool).timeout_s
            if spec_timeout is not None:
                return spec_timeout
        return self.settings.default_step_timeout_s
