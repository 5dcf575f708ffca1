"""The sessions list: search by goal or id, filters by status, age and tool, counts per
status and paging, over the SQL record (every session), with Redis's fresher view of the
sessions it still holds (and of those no supervisor has claimed yet)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from planloop.core.errors import SessionNotFoundError
from planloop.core.llm_budget import budget_view
from planloop.core.masking import mask
from planloop.core.models import SessionOptions, SessionRecord, SessionStatus
from planloop.core.record import PlanVersionRow, SessionRow
from planloop.planner.plan import Plan
from planloop.producer.client import Producer

PAGE_MAX = 100
UNCLAIMED_SCAN = 200  # the newest sessions in Redis looked at for ones SQL has not yet
STATUSES = [s.value for s in SessionStatus]


@dataclass(frozen=True)
class ListQuery:
    """What the list asks for: ``text`` in the goal or the id, ``statuses`` (any of them),
    created within ``max_age_s``, a step whose tool starts with ``tool``; one page."""

    text: str = ""
    statuses: list[str] = field(default_factory=list)
    max_age_s: float | None = None
    tool: str = ""
    page: int = 1
    page_size: int = 25

    @classmethod
    def from_params(cls, params: Any) -> ListQuery:
        def number(name: str, default: float) -> float:
            try:
                return float(params.get(name) or default)
            except ValueError:
                return default

        age = number("max_age_s", 0)
        return cls(
            text=str(params.get("q") or "").strip()[:200],
            statuses=[s for s in str(params.get("status") or "").split(",") if s in STATUSES],
            max_age_s=age if age > 0 else None,
            tool=str(params.get("tool") or "").strip()[:200],
            page=max(1, int(number("page", 1))),
            page_size=max(1, min(PAGE_MAX, int(number("page_size", number("limit", 25))))),
        )


def like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def sql_filters(query: ListQuery, now: float) -> list[ColumnElement[bool]]:
    """The conditions of every filter but the status one (counts are per status)."""
    wheres: list[ColumnElement[bool]] = []
    if query.text:
        pattern = like(query.text.lower())
        wheres.append(
            or_(
                func.lower(SessionRow.id).like(pattern, escape="\\"),
                func.lower(SessionRow.goal).like(pattern, escape="\\"),
            )
        )
    if query.max_age_s is not None:
        wheres.append(SessionRow.created_at >= now - query.max_age_s)
    if query.tool:
        # the stored plan JSON is compact: a step's tool reads "tool":"name"
        wanted = like('"tool":"' + query.tool).removesuffix("%")
        uses = select(PlanVersionRow.session_id).where(
            PlanVersionRow.plan.like(wanted + "%", escape="\\")
        )
        wheres.append(SessionRow.id.in_(uses))
    return wheres


def matches(query: ListQuery, record: SessionRecord, plan: Plan | None, now: float) -> bool:
    """:func:`sql_filters` for a session only Redis knows (status included)."""
    text = query.text.lower()
    if text and text not in record.id.lower() and text not in record.goal.lower():
        return False
    if query.max_age_s is not None and record.created_at < now - query.max_age_s:
        return False
    steps = plan.steps if plan else []
    return not query.tool or any(s.tool.startswith(query.tool) for s in steps)


def row_view(producer: Producer, sid: str, row: SessionRow | None, now: float) -> dict[str, Any]:
    """One row: Redis's view when it holds the session, else the record's."""
    try:
        hot = producer.session(sid)
    except SessionNotFoundError:
        hot = None
    if hot is not None:
        raw = producer.state.plan_json(sid, hot.plan_version)
        plan = Plan.model_validate_json(raw) if raw else None
        states = producer.state.steps(sid, plan.step_ids if plan else [])
        counts: dict[str, int] = {}
        for st in states.values():
            counts[st.status.value] = counts.get(st.status.value, 0) + 1
        usage, options = hot.llm_usage, hot.options
        status, goal, created = hot.status.value, hot.goal, hot.created_at
        replans, version, awaiting = hot.replans, hot.plan_version, hot.awaiting
    else:
        assert row is not None
        report = json.loads(row.report) if row.report else {}
        counts = dict(report.get("counts") or {})
        usage = producer.record.usage_of(sid)
        options = SessionOptions.model_validate(json.loads(row.options or "{}"))
        status, goal, created = row.status, row.goal, row.created_at
        replans, version, awaiting = row.replans, row.plan_version, ""
    spend = budget_view(usage, options, producer.settings)
    used_llm = any(p + c for p, c in usage.values())
    return {
        "id": sid,
        "status": status,
        "goal": mask(goal),
        "counts": counts,
        "steps_done": sum(
            n for s, n in counts.items() if s in ("completed", "failed", "skipped", "cancelled")
        ),
        "steps_total": sum(counts.values()),
        "age_s": round(max(0.0, now - created), 1),
        "created_at": created,
        "replans": replans,
        "plan_version": version,
        "tokens": spend["tokens"] if used_llm else None,
        "cost_usd": spend["cost_usd"] if used_llm else None,
        "awaiting": awaiting,
    }


def unclaimed(producer: Producer, known: set[str], query: ListQuery, now: float) -> list[str]:
    """Sessions Redis holds that the record has no row for yet (no supervisor took them)."""
    found = []
    for sid in producer.state.session_ids(UNCLAIMED_SCAN):
        if sid in known:
            continue
        try:
            record = producer.session(sid)
        except SessionNotFoundError:
            continue
        raw = producer.state.plan_json(sid, record.plan_version)
        plan = Plan.model_validate_json(raw) if raw else None
        wanted = not query.statuses or record.status.value in query.statuses
        if wanted and matches(query, record, plan, now):
            found.append(sid)
    return found


def list_sessions(producer: Producer, query: ListQuery) -> dict[str, Any]:
    """One page of the sessions that match, newest first, and the counts per status of
    every session the other filters let through."""
    now = time.time()
    wheres = sql_filters(query, now)
    with Session(producer.record.engine) as db:
        grouped = select(SessionRow.status, func.count()).where(*wheres).group_by(SessionRow.status)
        counts = {str(status): int(n) for status, n in db.execute(grouped)}
        listed = select(SessionRow).where(*wheres)
        if query.statuses:
            listed = listed.where(SessionRow.status.in_(query.statuses))
        total = int(db.scalar(select(func.count()).select_from(listed.subquery())) or 0)
        start = (query.page - 1) * query.page_size
        rows = db.scalars(
            listed.order_by(SessionRow.created_at.desc(), SessionRow.id)
            .offset(start)
            .limit(query.page_size)
        ).all()
        every = set(
            db.scalars(
                select(SessionRow.id).where(
                    SessionRow.id.in_(producer.state.session_ids(UNCLAIMED_SCAN))
                )
            ).all()
        )
    fresh = unclaimed(producer, every, query, now)
    for sid in fresh:
        status = producer.session(sid).status.value
        counts[status] = counts.get(status, 0) + 1
    shown = (fresh if query.page == 1 else []) + [r.id for r in rows]
    by_id = {r.id: r for r in rows}
    sessions = [row_view(producer, sid, by_id.get(sid), now) for sid in shown]
    return {
        "sessions": sessions,
        "counts": counts,
        "total": total + len(fresh),
        "page": query.page,
        "page_size": query.page_size,
    }
