"""What ending a session works with: events drained, writes in flight awaited, compensations
(saga) run for a session aborted, cancelled or failed. session/finish.py puts them in order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from planloop.core.catalogue import SensitiveNames
from planloop.core.metrics import DEAD_LETTERS
from planloop.core.models import (
    ErrorKind,
    Event,
    EventType,
    StepState,
    StepStatus,
    StepTaskArgs,
    idempotency_key,
)
from planloop.planner.plan import Step
from planloop.planner.react_step import is_agent_step
from planloop.planner.references import resolve_params
from planloop.supervisor.session.agent_undo import (
    AgentEffect,
    LateWrites,
    Undo,
    effect_undos,
    no_agent_effects,
    no_late_writes,
)
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.ports import SessionIO, describe_error, read_event
from planloop.supervisor.session.sending import TaskQueue
from planloop.supervisor.session.state import FINAL, SessionState

log = logging.getLogger(__name__)

COMPENSATE_SUFFIX = "~compensate"
COMPENSATION_ATTEMPTS = 3


@dataclass(frozen=True)
class Ending:
    """What ending a session needs, and no more: its state and store (through ``io``), the
    plan-change path that cancels steps, the task queue compensations go through, the
    sensitive names the report masks, and a checkpoint that waits for the SQL record."""

    io: SessionIO
    changes: PlanChanges
    queue: TaskQueue
    sensitive: SensitiveNames
    checkpoint: Callable[[], Awaitable[None]]
    # The agent-step writes the effect ledger recorded for the session (see agent_undo).
    agent_effects: Callable[[], Awaitable[list[AgentEffect]]] = no_agent_effects
    # The writes of plan steps that committed late, after their attempt timed out, given
    # the steps with their current keys (see agent_undo.late_writes).
    late_writes: LateWrites = no_late_writes
    # The record of the end, committed at once rather than with the next lingering round:
    # the session is seen ended only after it, so the linger would be paid by every
    # caller waiting for the end (None: ``checkpoint``).
    commit_now: Callable[[], Awaitable[None]] | None = None

    @property
    def state(self) -> SessionState:
        return self.io.state


async def drain_events(end: Ending) -> None:
    """Record and acknowledge what is still on the stream: nothing stays pending after the end.

    Pending entries first: a reply lost to a dropped connection, or a former owner's read,
    leaves events delivered but never applied, and the end may come before the idle claim.
    The claim and the first read of new entries go out together (one wait, not two, before
    the end is written); an entry both return is recorded once. New entries are read from
    the stream itself, with a look that does not block (a blocked read's timeout comes with
    Redis's cron, up to 100 ms late on a quiet server), not through the process's event
    hub: a hub read still blocked on this stream (the session was woken by it a moment ago)
    would otherwise be unblocked and waited for. What that read delivered before the claim
    is pending under this consumer, so the claim takes it (the hub's copy stays in a mailbox
    nobody reads); what comes later arrives after the drain, as it always could.
    """
    io = end.io

    async def read_new() -> list[tuple[str, dict[str, str]]]:
        return await io.store.read_events(io.sid, io.consumer, count=500, block_ms=None)

    pending, entries = await asyncio.gather(io.store.claim_pending(io.sid, io.consumer), read_new())
    seen: set[str] = set()
    while True:
        for entry_id, fields in [*pending, *entries]:
            if entry_id not in seen:
                seen.add(entry_id)
                await _record_entry(end, entry_id, fields)
        if not entries:
            return
        pending, entries = [], await read_new()


async def await_writes_in_flight(end: Ending) -> None:
    """Let write steps a worker already started finish, so a write that lands is undone.

    A tool call cannot be taken back halfway: cancelling a started write would drop its
    outcome while its effect still lands, uncompensated. Writes not yet started are
    cancelled with the rest (their claim then fails, so they never run).
    """
    state, io = end.state, end.io
    fresh = await io.store.steps(io.sid, list(state.steps))
    for step_id, st in fresh.items():
        mine = state.states.get(step_id)
        if (
            mine is not None
            and mine.status == StepStatus.RUNNING
            and st.status == StepStatus.COMPLETED
            and st.attempt == mine.attempt
        ):  # completed, its event not read yet: it is undone like any completed write
            state.states[step_id] = st
            state.dirty.add(step_id)
    waiting = {
        step_id: st.attempt
        for step_id, st in fresh.items()
        if st.status == StepStatus.RUNNING
        and st.started_at > 0
        and compensation_of(end, state.steps[step_id]) is not None
    }
    if not waiting:
        return
    longest = max(io.timeout(state.steps[i]) for i in waiting)
    deadline = time.monotonic() + longest + io.settings.watchdog_grace_s
    log.info("session=%s waiting for writes in flight: %s", io.sid, ", ".join(waiting))
    while waiting and time.monotonic() < deadline:
        entries = await io.read_events(count=100, block_ms=500)
        for entry_id, fields in entries:
            event = await _record_entry(end, entry_id, fields)
            if event is None or waiting.get(event.step_id) != event.attempt:
                continue
            if event.type in _OUTCOMES:
                _apply_outcome(state.states[event.step_id], event)
                state.dirty.add(event.step_id)
                del waiting[event.step_id]


_OUTCOMES = {
    EventType.TASK_COMPLETED: StepStatus.COMPLETED,
    EventType.TASK_UNEXPECTED_RESULT: StepStatus.COMPLETED,
    EventType.TASK_FAILED: StepStatus.FAILED,
    EventType.TASK_INTERRUPTED: StepStatus.INTERRUPTED,
}


def _apply_outcome(st: StepState, event: Event) -> None:
    st.status = _OUTCOMES[event.type]
    st.started_at = float(event.payload.get("started_at") or st.started_at)
    st.finished_at = float(event.payload.get("finished_at") or event.occurred_at)
    st.output_ref = str(event.payload.get("output_ref", ""))
    st.error_kind = str(event.payload.get("error_kind", ""))
    st.error = "" if st.status == StepStatus.COMPLETED else event.description
    st.note = FINAL


async def _record_entry(end: Ending, entry_id: str, fields: dict[str, str]) -> Event | None:
    """Acknowledge and record one entry read while ending; an unreadable one is dead-lettered."""
    state, io = end.state, end.io
    state.acks.append(entry_id)
    try:
        event = read_event(fields)
    except (ValueError, KeyError) as exc:
        cause = f"unreadable event: {describe_error(exc)}"
        await io.store.dead_letter(io.sid, [(entry_id, fields)], cause=cause)
        DEAD_LETTERS.inc()
        return None
    state.batch.events.append((entry_id, event))
    return event


def compensation_of(
    end: Ending, step: Step, output: Any = None
) -> tuple[str, dict[str, Any]] | None:
    """The tool call that undoes ``step``: its own ``compensate``, else its tool's default.

    The default call gets what it accepts from the step's params and output (a
    ``reservation_id`` from the receipt, the ``sku`` from the params); injected simulations
    stay with the step they were meant for.
    """
    state, io = end.state, end.io
    if step.compensate is not None:
        return step.compensate.tool, dict(step.compensate.params)
    if step.tool not in io.tools:
        return None
    spec = io.tools.get(step.tool)
    if spec.side_effect != "write" or not spec.compensate or spec.compensate not in io.tools:
        return None
    accepted = set(io.tools.get(spec.compensate).param_names()) - {"simulate"}
    output = state.outputs.get(step.id) if output is None else output
    known = {**step.params, **(output if isinstance(output, dict) else {})}
    return spec.compensate, {k: v for k, v in known.items() if k in accepted}


async def compensate(end: Ending) -> list[dict[str, Any]]:
    """Undo completed write steps, and every write agent steps made, newest first; each
    compensation is a Celery task with retries."""
    state, io = end.state, end.io
    if not state.steps:  # a plan that never loaded: nothing is known to undo
        return []
    done = [s for s in state.plan.steps if state.states[s.id].status == StepStatus.COMPLETED]
    await io.load_outputs(sorted({i for s in done for i in (s.id, *s.dependencies)}))
    todo: list[Undo] = []
    for step in done:
        call = compensation_of(end, step)
        if call is not None:
            todo.append(Undo(state.states[step.id].finished_at or 0.0, step, *call))
    todo.extend(await _agent_undos(end))
    todo.extend(await _late_undos(end, {s.id for s in done}))
    todo.sort(key=lambda u: u.at, reverse=True)
    results = []
    for undo in todo:
        step, tool = undo.step, undo.tool
        try:
            params = resolve_params(undo.params, state.outputs, step_id=step.id)
        except Exception as exc:  # a compensation we cannot even build is reported, not raised
            results.append(
                {
                    "step": step.id,
                    "tool": tool,
                    "status": "failed",
                    "attempts": 0,
                    "error": str(exc),
                }
            )
            continue
        results.append(await _run_compensation(end, undo, params))
    return results


async def _agent_undos(end: Ending) -> list[Undo]:
    """The compensations of the writes of agent steps that ran (completed or not) and have
    no explicit ``compensate``."""
    state = end.state
    agents = [
        s
        for s in state.plan.steps
        if is_agent_step(s)
        and s.compensate is None
        and state.states[s.id].attempt > 0  # it ran: its loop may have written
    ]
    if not agents:
        return []
    return effect_undos(end.io.tools, agents, await end.agent_effects())


async def _late_undos(end: Ending, done: set[str]) -> list[Undo]:
    """The compensations of writes that committed after their attempt timed out, for plan
    steps that never completed (core/effect_fence.py): undone like completed writes, the
    receipt standing in for the output."""
    state, sid = end.state, end.io.sid
    ran = [
        (s, idempotency_key(sid, s.id, state.info.redone.get(s.id, 0)))
        for s in state.plan.steps
        if s.id not in done and not is_agent_step(s) and state.states[s.id].attempt > 0
    ]
    if not ran:
        return []
    undos = []
    for step, effect in await end.late_writes(ran):
        call = compensation_of(end, step, effect.receipt)
        if call is not None:
            undos.append(Undo(effect.created_at, step, *call))
    return undos


async def _run_compensation(end: Ending, undo: Undo, params: dict[str, Any]) -> dict[str, Any]:
    io, step, tool = end.io, undo.step, undo.tool
    redo = end.state.info.redone.get(step.id, 0) if undo.turn is None else 0
    pseudo = f"{step.id}{COMPENSATE_SUFFIX}{undo.suffix}"
    timeout = io.timeout(step)
    outcome: Event | None = None
    attempt = 0
    for attempt in range(1, COMPENSATION_ATTEMPTS + 1):
        args = StepTaskArgs(
            session_id=io.sid,
            step_id=pseudo,
            attempt=attempt,
            epoch=io.epoch,
            tool=tool,
            params=params,
            timeout_s=timeout,
            # a write a continue redid is a new effect: its undo is one too
            idempotency_key=f"{idempotency_key(io.sid, undo.key, redo)}:compensate",
            # A worker serving the compensating tool (the step's own queue: wins); none
            # live: the base queue, and the outcome's timeout says so.
            queue=end.queue.route(step.model_copy(update={"tool": tool, "params": {}})) or "",
        )
        state = StepState(
            status=StepStatus.RUNNING,
            attempt=attempt,
            epoch=io.epoch,
            task_id=args.task_id,
            dispatched_at=time.time(),
        )
        await io.store.write(
            io.sid,
            io.epoch,
            [
                io.store.step_write(io.sid, pseudo, **state.to_fields()),
                *end.queue.commands(args),
            ],
        )
        outcome = await _await_outcome(end, pseudo, attempt, timeout + io.settings.watchdog_grace_s)
        if outcome is not None and outcome.type in (
            EventType.TASK_COMPLETED,
            EventType.TASK_UNEXPECTED_RESULT,
        ):
            break
        if outcome is not None and outcome.payload.get("error_kind") in (
            ErrorKind.PERMANENT,
            ErrorKind.UNSERVED,
        ):
            break
    ok = outcome is not None and outcome.type in (
        EventType.TASK_COMPLETED,
        EventType.TASK_UNEXPECTED_RESULT,
    )
    result = {
        "step": step.id,
        **({} if undo.turn is None else {"iteration": undo.turn}),
        "tool": tool,
        "status": "completed" if ok else "failed",
        "attempts": attempt,
        "error": None
        if ok
        else (outcome.description if outcome else "no outcome before the timeout"),
    }
    if not ok:
        log.error("session=%s step=%s COMPENSATION FAILED: %s", io.sid, step.id, result["error"])
    return result


async def _await_outcome(end: Ending, pseudo: str, attempt: int, timeout_s: float) -> Event | None:
    """Read the session's events until the outcome of ``pseudo``'s ``attempt`` arrives."""
    io = end.io
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entries = await io.read_events(count=100, block_ms=500)
        found = None
        for entry_id, fields in entries:
            event = await _record_entry(end, entry_id, fields)
            if event is not None and event.step_id == pseudo and event.attempt == attempt:
                found = event
        await end.checkpoint()
        if found is not None:
            return found
    await io.end_attempt(
        pseudo,
        attempt,
        status=StepStatus.INTERRUPTED,
        error_kind=ErrorKind.TIMEOUT.value,
        description=f"compensation attempt {attempt} timed out",
    )
    return None
