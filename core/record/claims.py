"""Sessions claimed by owners at epochs, many in one transaction, refused when ended or
fenced out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from planloop.core.errors import FencedOutError, SessionEndedError, SessionError
from planloop.core.record.batches import Claim
from planloop.core.record.tables import ENDED_STATUSES, PlanVersionRow, SessionRow

CLAIM_CHUNK = 500  # sessions per query of a grouped claim (bound parameters per statement)


def claim_many_rows(db: Session, claims: Sequence[Claim]) -> list[SessionError | None]:
    """The claims inside one transaction, in order: each refused (nothing written for it)
    when its session has ended or a newer epoch holds it.

    Set-based: the rows the claims touch are read (and locked, on PostgreSQL) in one query
    per ``CLAIM_CHUNK`` sessions and written with one statement per table. A thousand
    sessions starting together were two ORM look-ups and an ORM insert each, the
    supervisor's biggest CPU cost of a burst, paid under the GIL its event loop needs.
    """
    sessions = cast(Table, SessionRow.__table__)
    plan_versions = cast(Table, PlanVersionRow.__table__)
    sids = sorted({claim.sid for claim in claims})
    current: dict[str, tuple[str, int]] = {}  # sid -> (status, epoch), as the claims go
    plans: set[tuple[str, int]] = set()
    for start in range(0, len(sids), CLAIM_CHUNK):
        chunk = sids[start : start + CLAIM_CHUNK]
        found = db.execute(
            select(sessions.c.id, sessions.c.status, sessions.c.epoch)
            .where(sessions.c.id.in_(chunk))
            .with_for_update()
        )
        current.update({sid: (status, epoch) for sid, status, epoch in found})
        stored = db.execute(
            select(plan_versions.c.session_id, plan_versions.c.version).where(
                plan_versions.c.session_id.in_(chunk)
            )
        )
        plans.update((sid, version) for sid, version in stored)
    results: list[SessionError | None] = []
    created: dict[str, dict[str, Any]] = {}
    bumped: dict[str, dict[str, Any]] = {}
    new_plans: list[dict[str, Any]] = []
    for claim in claims:
        sid, epoch, now = claim.sid, claim.epoch, time.time()
        row = current.get(sid)
        if row is not None and row[0] in ENDED_STATUSES:
            results.append(SessionEndedError(sid, row[0]))
            continue
        if row is not None and row[1] >= epoch:
            results.append(FencedOutError(sid, epoch))
            continue
        plan = claim.plan
        if plan is not None and (sid, plan[0]) not in plans:
            plans.add((sid, plan[0]))
            reason = "submitted" if plan[0] == 1 else "restored on takeover"
            new_plans.append(
                {
                    "session_id": sid,
                    "version": plan[0],
                    "plan": plan[1],
                    "reason": reason,
                    "created_at": now,
                }
            )
        owned = {"epoch": epoch, "owner": claim.owner, "updated_at": now}
        if row is None:
            created[sid] = {"id": sid, **owned, **claim.fields}
            status = str(claim.fields.get("status", ""))
        elif sid in created:  # created by an earlier claim of this batch
            created[sid].update(owned)
            status = row[0]
        else:
            bumped[sid] = owned
            status = row[0]
        current[sid] = (status, epoch)
        results.append(None)
    if new_plans:
        db.execute(plan_versions.insert(), new_plans)
    # One INSERT per set of columns (executemany needs the same columns in every row).
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for values in created.values():
        by_columns.setdefault(tuple(sorted(values)), []).append(values)
    for rows in by_columns.values():
        db.execute(sessions.insert(), rows)
    if bumped:
        db.execute(
            update(sessions)
            .where(sessions.c.id == bindparam("claimed_id"))
            .values(
                epoch=bindparam("claimed_epoch"),
                owner=bindparam("claimed_owner"),
                updated_at=bindparam("claimed_at"),
            ),
            [
                {
                    "claimed_id": sid,
                    "claimed_epoch": v["epoch"],
                    "claimed_owner": v["owner"],
                    "claimed_at": v["updated_at"],
                }
                for sid, v in bumped.items()
            ],
        )
    return results
