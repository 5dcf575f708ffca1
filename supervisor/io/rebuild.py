"""Rebuild a session's hot state in Redis from the SQL record (Redis lost its data)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import zlib
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

from planloop.core.llm_budget import UsageByModel, add_calls
from planloop.core.models import Event, EventType, SessionStatus, StepState, StepStatus
from planloop.core.record import EventRow, StepAttemptRow
from planloop.planner.plan import Plan
from planloop.supervisor.io.redis_store import SessionStore
from planloop.supervisor.io.stream_flags import PLANNING_FIELD, STREAMED_REASON, STREAMING
from planloop.supervisor.process.context import SupervisorContext

log = logging.getLogger(__name__)


RUNNING_CHECKS_PER_ROUND = 100  # sessions with a loop here looked at per round, at most


def sessions_to_check(
    unfinished: Sequence[str],
    *,
    holds: Callable[[str], bool],
    running: Container[str],
    round_no: int,
    budget: int = RUNNING_CHECKS_PER_ROUND,
) -> list[str]:
    """The unfinished sessions one rebuild round looks for in Redis.

    Those of the shards held here that no loop runs, every round: a session Redis lost
    (adoption refuses one without hot state) is rebuilt within a round. Those whose loops
    run here, every round while they are at most ``budget``, else one slice of about
    ``budget`` per round: a running loop notices a lost hash at its next fenced write, but
    a parked one waits without writing, and an EXISTS per waiting session every round was
    most of what ten thousand waiting sessions cost Redis. Other supervisors' shards are
    theirs to look at.
    """
    held = [sid for sid in unfinished if holds(sid)]
    mine = [sid for sid in held if sid in running]
    slices = max(1, math.ceil(len(mine) / budget))
    return [
        sid
        for sid in held
        if sid not in running or zlib.crc32(sid.encode()) % slices == round_no % slices
    ]


async def rebuild_lost_sessions(
    ctx: SupervisorContext,
    store: SessionStore,
    choose: Callable[[Sequence[str]], list[str]] = list,
) -> list[str]:
    """Recreate the hot state of unfinished sessions that Redis no longer has, among those
    ``choose`` picks (all by default)."""
    rebuilt: list[str] = []
    unfinished = choose(await ctx.sql(ctx.record.unfinished))
    if not unfinished:
        return rebuilt
    pipe = store.r.pipeline(transaction=False)  # one round trip, however many there are
    for sid in unfinished:
        pipe.exists(store.keys.session(sid))
    for sid, present in zip(unfinished, await pipe.execute(), strict=True):
        if not present and await rebuild_session(ctx, store, sid):
            rebuilt.append(sid)
    return rebuilt


async def rebuild_session(ctx: SupervisorContext, store: SessionStore, sid: str) -> bool:
    """Write session hash, plan version, step hashes and outputs back from SQL.

    Attempts the record saw dispatched but not finished come back as running and never
    started, so the next owner sends them again under the same task id (the broker's copy
    went with Redis); completed steps keep their outputs and never run again.
    """
    row = await ctx.sql(lambda: ctx.record.session(sid))
    versions = await ctx.sql(lambda: ctx.record.plan_versions(sid))
    if row is None:
        return False
    if SessionStatus(row.status).ended:  # ended is final: never back to running
        log.info("session=%s ended %s; not rebuilt", sid, row.status)
        return False
    if not versions and row.plan_version:
        # The plan it was given lived only in Redis: nothing can run it again.
        error = (
            f"Redis lost this session's plan (version {row.plan_version}) before it was "
            "recorded in SQL; submit the session again"
        )
        if await ctx.sql(lambda: ctx.record.fail_unrecoverable(sid, error)):
            log.error("session=%s failed: %s", sid, error)
        return False
    attempts = await ctx.sql(lambda: ctx.record.attempts(sid))
    events = await ctx.sql(lambda: ctx.record.events(sid))
    calls = await ctx.sql(lambda: ctx.record.llm_calls(sid))
    llm_usage: UsageByModel = {}  # the LLM budgets go on counting from what was spent
    add_calls(
        llm_usage,
        (
            {
                "model": c.model,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
            }
            for c in calls
        ),
    )
    plan_row = versions[-1] if versions else None
    plan = Plan.model_validate_json(plan_row.plan) if plan_row else None
    latest: dict[str, Any] = {}
    for attempt in attempts:
        latest[attempt.step_id] = attempt  # ordered by step, then attempt
    refs = [a.output_ref for a in latest.values() if a.status == "completed" and a.output_ref]
    outputs = await ctx.sql(lambda: ctx.record.outputs(sid, refs))
    ttl = math.ceil(ctx.settings.blob_ttl_s) or None
    keys, r = store.keys, store.r
    # Before the hash, outside the transaction: a stream that survived (only the hash was
    # lost) already has its group, and BUSYGROUP inside it would fail the whole rebuild.
    await store.ensure_groups(sid)
    pipe = r.pipeline(transaction=True)
    pipe.hset(
        keys.session(sid),
        mapping={
            "status": row.status,
            "goal": row.goal,
            # 0: it was being planned from its goal; the next owner plans it again.
            "plan_version": plan_row.version if plan_row else 0,
            "epoch": row.epoch,
            "created_at": repr(row.created_at),
            "replans": row.replans,
            "options": row.options,
            "llm_usage": json.dumps(llm_usage),
            "owner": "",
            # It ran before: the next owner must read the step states written below.
            "started_at": repr(row.updated_at or row.created_at),
            # its last version was installed while the first plan streamed: not whole yet
            PLANNING_FIELD: STREAMING
            if plan_row is not None and plan_row.reason.startswith(STREAMED_REASON)
            else "",
        },
    )
    if plan_row is not None:
        pipe.set(keys.plan(sid, plan_row.version), plan_row.plan)
    for step in plan.steps if plan else []:
        st = StepState()
        last = latest.get(step.id)
        if last is not None:
            st = StepState(
                status=StepStatus(last.status),
                attempt=last.attempt,
                epoch=last.epoch,
                worker=last.worker,
                dispatched_at=last.dispatched_at,
                started_at=last.started_at if last.status != "running" else 0.0,
                finished_at=last.finished_at,
                error=last.error,
                error_kind=last.error_kind,
                output_ref=last.output_ref,
            )
            if st.output_ref in outputs:
                pipe.set(keys.blob(st.output_ref), outputs[st.output_ref], ex=ttl)
        pipe.hset(keys.step(sid, step.id), mapping=dict(st.to_fields()))  # type: ignore[arg-type]
    pipe.sadd(keys.active, sid)
    pipe.zadd(keys.sessions, {sid: row.created_at})
    await pipe.execute()
    recovered = completions_without_event(latest.values(), events)
    if recovered:
        await ctx.sql(lambda: ctx.record.add_events(sid, recovered))
    log.warning(
        "session=%s hot state rebuilt from SQL (plan version %d; %d completion events "
        "recovered from attempt rows)",
        sid,
        plan_row.version if plan_row else 0,
        len(recovered),
    )
    return True


def completions_without_event(
    attempts: Iterable[StepAttemptRow], events: Iterable[EventRow]
) -> list[tuple[str, Event]]:
    """Completion events for completed attempts the record has no event for.

    A takeover records a completed step's attempt row as soon as it sees the step hash;
    the worker's event may still sit unread in the stream when Redis loses its data. The
    attempt row proves the completion, so the event is written back from it.
    """
    seen = {
        (e.step_id, e.attempt)
        for e in events
        if e.type in (EventType.TASK_COMPLETED.value, EventType.TASK_UNEXPECTED_RESULT.value)
    }
    return [
        (
            # Stream ids look like 1700000000000-0; this one cannot collide with them.
            "rebuilt-" + hashlib.sha256(f"{a.step_id}#{a.attempt}".encode()).hexdigest()[:24],
            Event(
                type=EventType.TASK_COMPLETED,
                step_id=a.step_id,
                attempt=a.attempt,
                description="completion recovered from the attempt record (Redis lost the event)",
                occurred_at=a.finished_at or time.time(),
            ),
        )
        for a in attempts
        if a.status == StepStatus.COMPLETED.value and (a.step_id, a.attempt) not in seen
    ]
