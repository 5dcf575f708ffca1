"""Rebuild a session's hot state in Redis from the SQL record (Redis lost its data)."""

from __future__ import annotations

import logging
import math
from typing import Any

from core.models import SessionStatus, StepState, StepStatus
from planner.plan import Plan
from supervisor.context import SupervisorContext

log = logging.getLogger(__name__)


async def rebuild_lost_sessions(ctx: SupervisorContext) -> list[str]:
    """Recreate the hot state of unfinished sessions that Redis no longer has."""
    rebuilt = []
    for sid in await ctx.sql(ctx.record.unfinished):
        if await ctx.store.r.exists(ctx.store.keys.session(sid)):
            continue
        if await rebuild_session(ctx, sid):
            rebuilt.append(sid)
    return rebuilt


async def rebuild_session(ctx: SupervisorContext, sid: str) -> bool:
    """Write session hash, plan version, step hashes and outputs back from SQL.

    Attempts the record saw dispatched but not finished come back as running and never
    started, so the next owner sends them again under the same task id (the broker's copy
    went with Redis); completed steps keep their outputs and never run again.
    """
    row = await ctx.sql(lambda: ctx.record.session(sid))
    versions = await ctx.sql(lambda: ctx.record.plan_versions(sid))
    if row is None or not versions:
        return False
    if SessionStatus(row.status).ended:  # ended is final: never back to running
        log.info("session=%s ended %s; not rebuilt", sid, row.status)
        return False
    attempts = await ctx.sql(lambda: ctx.record.attempts(sid))
    plan_row = versions[-1]
    plan = Plan.model_validate_json(plan_row.plan)
    latest: dict[str, Any] = {}
    for attempt in attempts:
        latest[attempt.step_id] = attempt  # ordered by step, then attempt
    refs = [a.output_ref for a in latest.values() if a.status == "completed" and a.output_ref]
    outputs = await ctx.sql(lambda: ctx.record.outputs(sid, refs))
    ttl = math.ceil(ctx.settings.blob_ttl_s) or None
    keys, r = ctx.store.keys, ctx.store.r
    # Before the hash, outside the transaction: a stream that survived (only the hash was
    # lost) already has its group, and BUSYGROUP inside it would fail the whole rebuild.
    await ctx.store.ensure_groups(sid)
    pipe = r.pipeline(transaction=True)
    pipe.hset(
        keys.session(sid),
        mapping={
            "status": row.status,
            "goal": row.goal,
            "plan_version": plan_row.version,
            "epoch": row.epoch,
            "created_at": repr(row.created_at),
            "replans": row.replans,
            "options": row.options,
            "owner": "",
            # It ran before: the next owner must read the step states written below.
            "started_at": repr(row.updated_at or row.created_at),
        },
    )
    pipe.set(keys.plan(sid, plan_row.version), plan_row.plan)
    for step in plan.steps:
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
    log.warning("session=%s hot state rebuilt from SQL (plan version %d)", sid, plan_row.version)
    return True
