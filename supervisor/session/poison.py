"""Poison sessions: count a session's loop crashes, and end it when they are too many.

A session whose loop crashes (an unparsable plan, an event that breaks it) would otherwise be
retried forever. Crashes are counted in the session hash (``crashes``, and ``last_crash``
the latest error; core/lua/session_writes.py ``CountCrash``), so every supervisor
adds to the same count; at ``max_session_crashes`` the session ends ``failed``, the
compensations of its completed writes run, and the event being applied when it crashed goes
to the dead letters with the error. A session whose cancel is pending ends ``cancelled`` at
its first crash. The ending reads only what still loads (session hash, plan, step hashes,
SQL record), never the state the crash came from; when even that fails, a bare ending
writes status, error and a minimal report.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import OperationalError

from planloop.core.errors import FencedOutError, SessionEndedError
from planloop.core.hot_state import dumps
from planloop.core.lua import CountCrash
from planloop.core.masking import mask
from planloop.core.metrics import DEAD_LETTERS
from planloop.core.models import SessionRecord, SessionStatus, StepState
from planloop.core.record import Checkpoint
from planloop.planner.plan import Plan
from planloop.planner.summarizer import SessionAnswer
from planloop.supervisor.io.redis_store import SessionStore
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.answer_text import account_text, compensations_text, ended_text
from planloop.supervisor.session.claim import claim_session
from planloop.supervisor.session.finish import finish_session
from planloop.supervisor.session.loop import SessionRunner
from planloop.supervisor.session.start import record_events
from planloop.supervisor.session.state import SessionState

log = logging.getLogger(__name__)

# Faults of Redis or the database, not of the session: a crash they cause is not counted.
INFRASTRUCTURE_FAULTS = (RedisConnectionError, RedisTimeoutError, OperationalError, OSError)


@dataclass(frozen=True)
class Crash:
    """One crash of a session's loop, as counted in its hash."""

    count: int  # crashes so far, this one included (0: not counted)
    cancel: str | None  # the reason of a pending cancel, if one was asked for


async def count_crash(store: SessionStore, sid: str, error: str, exc: Exception) -> Crash:
    """Add this crash to the session's count (unless Redis or SQL caused it)."""
    if isinstance(exc, INFRASTRUCTURE_FAULTS):
        return Crash(0, None)
    script = CountCrash.register_async(store.r)
    call = CountCrash(session_key=store.keys.session(sid), error=error)
    count, cancelled, reason = await script(call)
    return Crash(int(count), str(reason) if cancelled else None)


async def end_crashed_session(
    ctx: SupervisorContext,
    sid: str,
    epoch: int,
    *,
    status: SessionStatus,
    error: str,
    cause: tuple[str, dict[str, str]] | None,
) -> None:
    """End a session whose loop cannot run, from what still loads; compensate its writes."""
    if cause is not None:
        await ctx.store.dead_letter(sid, [cause], cause=error)
        DEAD_LETTERS.inc()
    runner = SessionRunner(ctx, sid, epoch)

    async def account(compensations: list[dict[str, Any]]) -> dict[str, Any]:
        return crash_conclusion(
            runner.state, status, error, compensations, llm=ctx.chat is not None
        )

    try:
        runner.wire(await _load_what_can(ctx, sid, epoch))  # the state first, then its parts
        await finish_session(runner.ending, status, error, conclude=account)
    except SessionEndedError as exc:
        log.info("session=%s %s", sid, exc)
        await ctx.store.leave_active(sid)
    except FencedOutError:
        log.warning("session=%s epoch=%d fenced out while ending it", sid, epoch)
    except Exception:
        log.exception("session=%s cannot end through its own state; ending it bare", sid)
        await _end_bare(ctx, sid, epoch, status, error)
    finally:
        await runner.checkpointer.close()


def crash_conclusion(
    state: SessionState,
    status: SessionStatus,
    error: str,
    compensations: Sequence[Mapping[str, Any]] = (),
    *,
    llm: bool,
) -> dict[str, Any]:
    """What a session with an LLM that crashed its loop too often adds to its report: an
    answer, as every LLM session ends with one, written by Planloop from the steps (no model
    call: the model's answers may be what crashed the loop). Empty without an LLM."""
    if not llm:
        return {}
    reason = "; ".join(filter(None, [error, compensations_text(compensations)]))
    answer = SessionAnswer(
        text=account_text(state, ended_text(status, reason)), partial=True, source="planloop"
    )
    return {"answer": mask(answer.model_dump())}


async def _load_what_can(ctx: SupervisorContext, sid: str, epoch: int) -> SessionState:
    """Session record, plan and step states, each only if it parses; claim the SQL row."""
    state, store = SessionState(sid, epoch), ctx.store
    fields = await store.session_fields(sid)
    if fields.get("status") and SessionStatus(fields["status"]).ended:
        raise SessionEndedError(sid, fields["status"])
    try:
        state.info = SessionRecord.from_fields(sid, fields)
    except ValueError:
        state.info = SessionRecord(id=sid, goal=fields.get("goal", ""))
    version = state.info.plan_version
    raw = await store.plan_json(sid, version) if version else None
    if raw is None and version:
        versions = await ctx.sql(lambda: ctx.record.plan_versions(sid))
        raw = versions[-1].plan if versions else None
    with contextlib.suppress(FencedOutError):  # claimed at this epoch already
        await claim_session(ctx, state, (version, raw) if raw is not None else None)
    plan = _parse_plan(sid, raw)
    if plan is None:
        return state
    state.use_plan(plan)
    state.states = await store.steps(sid, state.steps)
    for step_id in state.steps:
        state.states.setdefault(step_id, StepState())
    state.reindex()
    # What a former owner left unacknowledged is recorded, not applied: nothing stays
    # pending after the end (the step hashes already say which writes completed).
    pending = await store.claim_pending(sid, ctx.name)
    state.acks += [entry_id for entry_id, _ in pending]
    record_events(state, pending)
    return state


def _parse_plan(sid: str, raw: str | None) -> Plan | None:
    if raw is None:
        return None
    try:
        return Plan.model_validate_json(raw)
    except (ValueError, RecursionError) as exc:
        log.error("session=%s plan cannot be read (%s): no step can be compensated", sid, exc)
        return None


async def _end_bare(
    ctx: SupervisorContext, sid: str, epoch: int, status: SessionStatus, error: str
) -> None:
    """Status, error and a report without steps, in SQL (if it takes them) and in Redis."""
    now = time.time()
    report: dict[str, Any] = {
        "session_id": sid,
        "status": status.value,
        "error": error,
        "finished_at": now,
        "counts": {},
        "steps": [],
        "compensations": [],
    }
    fields = {"status": status.value, "finished_at": now, "error": error, "report": dumps(report)}
    try:
        await ctx.sql(lambda: ctx.record.checkpoint(sid, epoch, Checkpoint(session=fields)))
    except Exception:
        log.exception("session=%s its SQL record cannot take the ending", sid)
    keys = ctx.store.keys
    try:
        await ctx.store.write(
            sid,
            epoch,
            [
                (
                    "HSET",
                    keys.session(sid),
                    ["status", status.value, "finished_at", now, "error", error, "report", report],
                ),
                ("SREM", keys.active, [sid]),
            ],
        )
    except FencedOutError:
        log.warning("session=%s epoch=%d fenced out while ending it bare", sid, epoch)
        return
    await ctx.store.note_progress(sid, "ended", status=status.value, error=error)
    log.error("session=%s ended %s (bare): %s", sid, status.value, error)
