"""Finishing a session: stop what runs, compensate when it must, report, then tell Redis."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from planloop.core.hot_state import dumps
from planloop.core.masking import mask, mask_text
from planloop.core.metrics import count_session_end
from planloop.core.models import SessionStatus, StepStatus
from planloop.core.record import SessionRow
from planloop.core.tracing import session_span
from planloop.planner.plan import Plan
from planloop.supervisor.io.store_port import SessionStorePort
from planloop.supervisor.session.ending import (
    Ending,
    await_writes_in_flight,
    compensate,
    drain_events,
)
from planloop.supervisor.session.report import build_report
from planloop.supervisor.session.state import has_ended

log = logging.getLogger(__name__)

# What a session with an LLM adds to its report, given the compensations that ran.
Conclude = Callable[[list[dict[str, Any]]], Awaitable[Mapping[str, Any]]]


async def finish_session(
    end: Ending,
    status: SessionStatus,
    error: str,
    *,
    undo: bool | None = None,
    conclude: Conclude | None = None,
) -> None:
    """End the session: every step ends, compensations run if needed, the report is written.

    ``undo`` (compensate completed writes) defaults to :func:`undoes`; ``conclude`` is
    called with the compensations once they ran, and what it returns (the answer, the
    critic's verdict, the rounds of a session with an LLM) goes into the report.
    """
    state, io = end.state, end.io
    if undo is None:
        undo = undoes(status, compensate_on_failure=state.info.options.compensate_on_failure)
    if undo:
        await await_writes_in_flight(end)
    unfinished = [i for i, st in state.states.items() if not has_ended(st)]
    await end.changes.cancel_steps(unfinished, reason=f"session {status.value}")
    compensations: list[dict[str, Any]] = []
    if undo:
        compensations = await compensate(end)
    failed = [c["step"] for c in compensations if c["status"] != "completed"]
    if failed:
        error = f"{error}; COMPENSATION FAILED for {', '.join(failed)}".lstrip("; ")
    conclusion = await conclude(compensations) if conclude is not None else {}
    error = mask_text(error)  # shown by status, show and the SQL record: one masker
    now = time.time()
    # The outputs the report shows (one MGET: the session is over, they need not stay hot;
    # the SQL record keeps the durable copies), and what is still on the stream (recorded,
    # not applied: the report does not read it), in one wait rather than one after the other.
    completed = [i for i, st in state.states.items() if st.status == StepStatus.COMPLETED]
    await asyncio.gather(io.load_outputs(completed, keep_hot=False), drain_events(end))
    # A goal whose planning failed has no plan to report steps of.
    plan = state.plan if state.steps else Plan.model_construct(goal=state.info.goal, steps=[])
    report = build_report(
        io.sid,
        plan,
        state.states,
        state.outputs,
        status=status,
        error=error,
        started_at=state.info.started_at,
        finished_at=now,
        replans=state.info.replans,
        plan_version=state.info.plan_version,
        sensitive=end.sensitive.of_tools(s.tool for s in plan.steps),
    )
    report["compensations"] = mask(compensations)
    report.update(conclusion)
    state.batch.session.update(
        {
            "status": status.value,
            "finished_at": now,
            "error": error,
            "report": dumps(report),
            "replans": state.info.replans,
            "plan_version": state.info.plan_version,
        }
    )
    # The record first: whoever sees the session ended in Redis finds it complete in SQL.
    await (end.commit_now or end.checkpoint)()
    keys = io.store.keys
    await io.store.write(
        io.sid,
        io.epoch,
        [
            (
                "HSET",
                keys.session(io.sid),
                ["status", status.value, "finished_at", now, "error", error, "report", report],
            ),
            ("SREM", keys.active, [io.sid]),
            # With the status, in the same call: a client waiting for the end sees it one
            # round trip sooner (the end's last lap on a busy loop).
            io.store.progress_op(io.sid, "ended", status=status.value, error=error),
        ],
    )
    count_session_end(status.value)
    session_span(io.sid, status.value, state.info.started_at, now)
    log.info("session=%s ended %s%s", io.sid, status.value, f": {error}" if error else "")


def undoes(status: SessionStatus, *, compensate_on_failure: bool) -> bool:
    """Whether a session ending ``status`` compensates its completed writes: aborted and
    cancelled ones always; failed ones (a critical failure, the deadline) unless the
    submitter chose to keep the effects of a failed session."""
    if status == SessionStatus.FAILED:
        return compensate_on_failure
    return status in (SessionStatus.ABORTED, SessionStatus.CANCELLED)


async def adopt_recorded_ending(
    store: SessionStorePort, sid: str, epoch: int, row: SessionRow | None
) -> None:
    """Copy the ending the SQL record (``row``) holds into Redis (an owner that died after
    writing the record and before Redis left the hot state saying running)."""
    if row is None or not SessionStatus(row.status).ended:
        return
    keys = store.keys
    fields = ["status", row.status, "finished_at", row.finished_at, "error", row.error]
    await store.write(
        sid,
        epoch,
        [
            ("HSET", keys.session(sid), [*fields, "report", row.report or ""]),
            ("SREM", keys.active, [sid]),
        ],
    )
    log.warning("session=%s ended %s in the record: hot state brought in line", sid, row.status)
