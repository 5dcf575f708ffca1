"""Ending a session: stop what runs, compensate (saga) when aborted or cancelled, report."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from core.hot_state import dumps
from core.masking import mask, mask_text
from core.models import (
    ErrorKind,
    Event,
    EventType,
    SessionStatus,
    StepState,
    StepStatus,
    StepTaskArgs,
)
from planner.plan import Plan, Step
from planner.references import resolve_params
from supervisor.report import build_report
from supervisor.session_base import FINAL, describe_error, has_ended, read_event

if TYPE_CHECKING:
    from supervisor.session import SessionRunner

log = logging.getLogger(__name__)

COMPENSATE_SUFFIX = "~compensate"
COMPENSATION_ATTEMPTS = 3


async def finish_session(
    runner: SessionRunner, status: SessionStatus, error: str, *, undo: bool | None = None
) -> None:
    """End the session: every step ends, compensations run if needed, the report is written.

    ``undo`` (compensate completed writes) defaults to aborted and cancelled sessions; a
    poison session that ends failed asks for it too.
    """
    if undo is None:
        undo = status in (SessionStatus.ABORTED, SessionStatus.CANCELLED)
    if undo:
        await await_writes_in_flight(runner)
    unfinished = [i for i, st in runner.states.items() if not has_ended(st)]
    await runner.cancel_steps(unfinished, reason=f"session {status.value}")
    compensations: list[dict[str, Any]] = []
    if undo:
        compensations = await compensate(runner)
    failed = [c["step"] for c in compensations if c["status"] != "completed"]
    if failed:
        error = f"{error}; COMPENSATION FAILED for {', '.join(failed)}".lstrip("; ")
    error = mask_text(error)  # shown by status, show and the SQL record: one masker
    now = time.time()
    await runner.load_outputs(
        [i for i, st in runner.states.items() if st.status == StepStatus.COMPLETED]
    )
    # A goal whose planning failed has no plan to report steps of.
    plan = runner.plan if runner.steps else Plan.model_construct(goal=runner.info.goal, steps=[])
    report = build_report(
        runner.sid,
        plan,
        runner.states,
        runner.outputs,
        status=status,
        error=error,
        started_at=runner.info.started_at,
        finished_at=now,
        replans=runner.info.replans,
        plan_version=runner.info.plan_version,
        sensitive=runner.ctx.dispatcher.sensitive.of_tools(s.tool for s in plan.steps),
    )
    report["compensations"] = mask(compensations)
    runner.batch.session.update(
        {
            "status": status.value,
            "finished_at": now,
            "error": error,
            "report": dumps(report),
            "replans": runner.info.replans,
            "plan_version": runner.info.plan_version,
        }
    )
    # The record first: whoever sees the session ended in Redis finds it complete in SQL.
    await drain_events(runner)
    await runner.checkpoint()
    keys = runner.store.keys
    await runner.store.write(
        runner.sid,
        runner.epoch,
        [
            (
                "HSET",
                keys.session(runner.sid),
                ["status", status.value, "finished_at", now, "error", error, "report", report],
            ),
            ("SREM", keys.active, [runner.sid]),
        ],
    )
    await runner.store.note_progress(runner.sid, "ended", status=status.value, error=error)
    log.info("session=%s ended %s%s", runner.sid, status.value, f": {error}" if error else "")


async def adopt_recorded_ending(runner: SessionRunner) -> None:
    """Copy the ending the SQL record holds into Redis (an owner that died after writing
    the record and before Redis left the hot state saying running)."""
    row = await runner.ctx.sql(lambda: runner.ctx.record.session(runner.sid))
    if row is None or not SessionStatus(row.status).ended:
        return
    keys = runner.store.keys
    fields = ["status", row.status, "finished_at", row.finished_at, "error", row.error]
    await runner.store.write(
        runner.sid,
        runner.epoch,
        [
            ("HSET", keys.session(runner.sid), [*fields, "report", row.report or ""]),
            ("SREM", keys.active, [runner.sid]),
        ],
    )
    log.warning(
        "session=%s ended %s in the record: hot state brought in line", runner.sid, row.status
    )


async def drain_events(runner: SessionRunner) -> None:
    """Record and acknowledge what is still on the stream: nothing stays pending after the end.

    Pending entries first: a reply lost to a dropped connection, or a former owner's read,
    leaves events delivered but never applied, and the end may come before the idle claim.
    """
    for entry_id, fields in await runner.store.claim_pending(runner.sid, runner.ctx.name):
        await _record_entry(runner, entry_id, fields)
    while True:
        entries = await runner.store.read_events(runner.sid, runner.ctx.name, count=500, block_ms=1)
        if not entries:
            return
        for entry_id, fields in entries:
            await _record_entry(runner, entry_id, fields)


async def await_writes_in_flight(runner: SessionRunner) -> None:
    """Let write steps a worker already started finish, so a write that lands is undone.

    A tool call cannot be taken back halfway: cancelling a started write would drop its
    outcome while its effect still lands, uncompensated. Writes not yet started are
    cancelled with the rest (their claim then fails, so they never run).
    """
    fresh = await runner.store.steps(runner.sid, list(runner.steps))
    for step_id, st in fresh.items():
        mine = runner.states.get(step_id)
        if (
            mine is not None
            and mine.status == StepStatus.RUNNING
            and st.status == StepStatus.COMPLETED
            and st.attempt == mine.attempt
        ):  # completed, its event not read yet: it is undone like any completed write
            runner.states[step_id] = st
            runner.dirty.add(step_id)
    waiting = {
        step_id: st.attempt
        for step_id, st in fresh.items()
        if st.status == StepStatus.RUNNING
        and st.started_at > 0
        and compensation_of(runner, runner.steps[step_id]) is not None
    }
    if not waiting:
        return
    longest = max(runner.timeout(runner.steps[i]) for i in waiting)
    deadline = time.monotonic() + longest + runner.settings.watchdog_grace_s
    log.info("session=%s waiting for writes in flight: %s", runner.sid, ", ".join(waiting))
    while waiting and time.monotonic() < deadline:
        entries = await runner.store.read_events(
            runner.sid, runner.ctx.name, count=100, block_ms=500
        )
        for entry_id, fields in entries:
            event = await _record_entry(runner, entry_id, fields)
            if event is None or waiting.get(event.step_id) != event.attempt:
                continue
            if event.type in _OUTCOMES:
                _apply_outcome(runner.states[event.step_id], event)
                runner.dirty.add(event.step_id)
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


async def _record_entry(
    runner: SessionRunner, entry_id: str, fields: dict[str, str]
) -> Event | None:
    """Acknowledge and record one entry read while ending; an unreadable one is dead-lettered."""
    runner.acks.append(entry_id)
    try:
        event = read_event(fields)
    except (ValueError, KeyError) as exc:
        cause = f"unreadable event: {describe_error(exc)}"
        await runner.store.dead_letter(runner.sid, [(entry_id, fields)], cause=cause)
        return None
    runner.batch.events.append((entry_id, event))
    return event


def compensation_of(runner: SessionRunner, step: Step) -> tuple[str, dict[str, Any]] | None:
    """The tool call that undoes ``step``: its own ``compensate``, else its tool's default.

    The default call gets what it accepts from the step's params and output (a
    ``reservation_id`` from the receipt, the ``sku`` from the params); injected simulations
    stay with the step they were meant for.
    """
    if step.compensate is not None:
        return step.compensate.tool, dict(step.compensate.params)
    if step.tool not in runner.ctx.tools:
        return None
    spec = runner.ctx.tools.get(step.tool)
    if (
        spec.side_effect != "write"
        or not spec.compensate
        or spec.compensate not in runner.ctx.tools
    ):
        return None
    accepted = set(runner.ctx.tools.get(spec.compensate).params_model.model_fields) - {"simulate"}
    output = runner.outputs.get(step.id)
    known = {**step.params, **(output if isinstance(output, dict) else {})}
    return spec.compensate, {k: v for k, v in known.items() if k in accepted}


async def compensate(runner: SessionRunner) -> list[dict[str, Any]]:
    """Undo completed write steps in reverse completion order, each a Celery task with retries."""
    if not runner.steps:  # a plan that never loaded: nothing is known to undo
        return []
    done = [s for s in runner.plan.steps if runner.states[s.id].status == StepStatus.COMPLETED]
    done.sort(key=lambda s: runner.states[s.id].finished_at, reverse=True)
    results = []
    for step in done:
        await runner.load_outputs([step.id, *step.dependencies])
        call = compensation_of(runner, step)
        if call is None:
            continue
        tool, raw_params = call
        try:
            params = resolve_params(raw_params, runner.outputs, step_id=step.id)
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
        results.append(await _run_compensation(runner, step, tool, params))
    return results


async def _run_compensation(
    runner: SessionRunner, step: Step, tool: str, params: dict[str, Any]
) -> dict[str, Any]:
    pseudo = f"{step.id}{COMPENSATE_SUFFIX}"
    timeout = runner.timeout(step)
    outcome: Event | None = None
    attempt = 0
    for attempt in range(1, COMPENSATION_ATTEMPTS + 1):
        args = StepTaskArgs(
            session_id=runner.sid,
            step_id=pseudo,
            attempt=attempt,
            epoch=runner.epoch,
            tool=tool,
            params=params,
            timeout_s=timeout,
            idempotency_key=f"{runner.sid}:{step.id}:compensate",
        )
        state = StepState(
            status=StepStatus.RUNNING,
            attempt=attempt,
            epoch=runner.epoch,
            task_id=args.task_id,
            dispatched_at=time.time(),
        )
        await runner.store.write(
            runner.sid,
            runner.epoch,
            [
                runner.store.step_write(runner.sid, pseudo, **state.to_fields()),
                *runner.ctx.dispatcher.commands(args),
            ],
        )
        outcome = await _await_outcome(
            runner, pseudo, attempt, timeout + runner.settings.watchdog_grace_s
        )
        if outcome is not None and outcome.type in (
            EventType.TASK_COMPLETED,
            EventType.TASK_UNEXPECTED_RESULT,
        ):
            break
        if outcome is not None and outcome.payload.get("error_kind") == ErrorKind.PERMANENT:
            break
    ok = outcome is not None and outcome.type in (
        EventType.TASK_COMPLETED,
        EventType.TASK_UNEXPECTED_RESULT,
    )
    result = {
        "step": step.id,
        "tool": tool,
        "status": "completed" if ok else "failed",
        "attempts": attempt,
        "error": None
        if ok
        else (outcome.description if outcome else "no outcome before the timeout"),
    }
    if not ok:
        log.error(
            "session=%s step=%s COMPENSATION FAILED: %s", runner.sid, step.id, result["error"]
        )
    return result


async def _await_outcome(
    runner: SessionRunner, pseudo: str, attempt: int, timeout_s: float
) -> Event | None:
    """Read the session's events until the outcome of ``pseudo``'s ``attempt`` arrives."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entries = await runner.store.read_events(
            runner.sid, runner.ctx.name, count=100, block_ms=500
        )
        found = None
        for entry_id, fields in entries:
            event = await _record_entry(runner, entry_id, fields)
            if event is not None and event.step_id == pseudo and event.attempt == attempt:
                found = event
        await runner.checkpoint()
        if found is not None:
            return found
    await runner.end_attempt(
        pseudo,
        attempt,
        status=StepStatus.INTERRUPTED,
        error_kind=ErrorKind.TIMEOUT.value,
        description=f"compensation attempt {attempt} timed out",
    )
    return None
