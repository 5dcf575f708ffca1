"""Late effects settled once their session has ended: kept, or undone after the ending.

A tool that cannot be stopped may commit its write after its attempt's timeout and after
the bounded wait for it (core/effect_fence.py). The ledger records such a write with the
effect, as a pending late effect (``late_effects``), and hands it here. It is settled once
the session's ending is in the SQL record, by what that ending did:

1. The report lists a completed compensation of the step (the ending found the write, or
   the step completed by reusing it and was undone): settled ``compensated`` by the ending.
2. The session keeps its writes (completed, or failed without compensation): ``kept``.
3. Otherwise the ending ran before the write committed and missed it: it is compensated
   now, in this worker, like a completed write (the step's own ``compensate``, else the
   tool's default fed from the receipt), under the same idempotency key the ending's
   compensation would use (``{key}:compensate``), so it is never undone twice; settled
   ``compensated`` (or ``failed``, with the error) by ``late``.

A session that has not ended within ``late_effect_settle_s`` leaves the row ``pending``
(``planloop show`` lists it); so does a worker that stops meanwhile, even halfway through
the compensation (its uncommitted claim of ``{key}:compensate`` rolls back with its
connection). Every worker process sweeps for such rows (once it runs its first step, then
every ``late_effect_sweep_s``): a row pending for longer than ``late_effect_settle_s`` has
no settler waiting for it any more, and once its session has ended it is settled as above.
Two sweepers settling one row undo it once: the compensation runs under its idempotency key.
A sweeper that does not serve the compensation (a worker of another pool) leaves the row
pending for one that does, and looks on past it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import RowMapping, Table, and_, or_, select, update

from planloop.core.effects import SqlEffectLedger
from planloop.core.record import ENDED_STATUSES, LateEffectRow, PlanVersionRow, SessionRow
from planloop.core.tools import ToolContext, ToolRegistry
from planloop.planner.plan import Plan, Step
from planloop.planner.references import resolve_params

log = logging.getLogger(__name__)

LATE = cast(Table, LateEffectRow.__table__)
ATTEMPTS = 3  # tries of a compensation run here, as the ending gives its own
SWEEP_LIMIT = 100  # rows settled per look (read a page at a time): the next look takes the rest
_TURN = re.compile(r":react:(?P<turn>\d+)$")


class _NotServed(Exception):  # noqa: N818 (reads as what it is)
    """The compensation's tool (``tool``, "" when unknown here) is not served by this worker."""

    def __init__(self, why: str, tool: str) -> None:
        super().__init__(why)
        self.tool = tool


@dataclass(frozen=True)
class Ended:
    """What the SQL record says of an ended session."""

    status: str
    report: Mapping[str, Any]
    compensate_on_failure: bool


def settlement(ended: Ended, step_id: str, turn: int | None) -> str:
    """``ending`` (the ending undid it), ``kept`` (the session keeps its writes) or ``undo``."""
    for comp in ended.report.get("compensations") or []:
        if (
            comp.get("step") == step_id
            and comp.get("iteration") == turn
            and comp.get("status") == "completed"
        ):
            return "ending"
    # The ending's own rule (supervisor/session/finish.py undoes)
    undoes = ended.status in ("aborted", "cancelled") or (
        ended.status == "failed" and ended.compensate_on_failure
    )
    return "undo" if undoes else "kept"


class LateEffectSettler:
    """The ledger's ``on_late``: settles each late effect on a thread of its own."""

    def __init__(
        self, ledger: SqlEffectLedger, tools: ToolRegistry, settle_s: float, poll_s: float = 0.5
    ) -> None:
        self.ledger = ledger
        self.tools = tools
        self.settle_s = settle_s
        self.poll_s = poll_s

    def __call__(self, row: dict[str, Any], receipt: dict[str, Any]) -> None:
        key = str(row["idempotency_key"])
        worker = threading.Thread(
            target=self._settle_logged, args=(row, receipt), name=f"late:{key}", daemon=True
        )
        worker.start()

    def _settle_logged(self, row: dict[str, Any], receipt: dict[str, Any]) -> None:
        try:
            self.settle(row, receipt)
        except Exception:  # a settling that fails leaves the row pending, said in the log
            log.exception(
                "session=%s step=%s late effect %s not settled",
                row["session_id"],
                row["step_id"],
                row["idempotency_key"],
            )

    def start_sweeping(self, every_s: float) -> threading.Thread:
        """Settle what is left pending now and every ``every_s``, on a daemon thread."""

        def sweep() -> None:
            while True:
                try:
                    self.settle_left_over()
                except Exception:  # the next look tries again; the rows stay pending
                    log.exception("the sweep for late effects left pending failed")
                time.sleep(every_s)

        sweeper = threading.Thread(target=sweep, name="late-effects-sweep", daemon=True)
        sweeper.start()
        return sweeper

    def settle_left_over(self) -> int:
        """Settle the late effects no settler waits for any more (pending for longer than
        ``settle_s``) whose sessions have ended; how many were settled.

        Rows this worker leaves pending (another pool serves their compensation) or fails
        to settle are paged past, so they never hide the rows behind them."""
        settled, after = 0, (0.0, "")
        before = time.time() - self.settle_s
        while settled < SWEEP_LIMIT:
            rows = self._left_over(before, after)
            for row in rows:
                after = (row["committed_at"], row["idempotency_key"])
                settled += self._settle_left(row) != "pending"
            if len(rows) < SWEEP_LIMIT:
                break
        return settled

    def _left_over(self, before: float, after: tuple[float, str]) -> Sequence[RowMapping]:
        """A page of the rows pending since before ``before``, their sessions ended, that
        come after ``after`` (committed_at, key)."""
        at, key = after
        with self.ledger.engine.connect() as conn:
            return (
                conn.execute(
                    select(
                        LATE.c.idempotency_key,
                        LATE.c.session_id,
                        LATE.c.step_id,
                        LATE.c.tool,
                        LATE.c.committed_at,
                    )
                    .join(SessionRow, SessionRow.id == LATE.c.session_id)
                    .where(
                        LATE.c.status == "pending",
                        LATE.c.committed_at < before,
                        SessionRow.status.in_(ENDED_STATUSES),
                        or_(
                            LATE.c.committed_at > at,
                            and_(LATE.c.committed_at == at, LATE.c.idempotency_key > key),
                        ),
                    )
                    .order_by(LATE.c.committed_at, LATE.c.idempotency_key)
                    .limit(SWEEP_LIMIT)
                )
                .mappings()
                .all()
            )

    def _settle_left(self, row: RowMapping) -> str:
        sid, step_id, key = row["session_id"], row["step_id"], row["idempotency_key"]
        log.info(
            "session=%s step=%s late effect %s left pending: settling it now", sid, step_id, key
        )
        try:
            receipt = self.ledger.receipt(key) or {}
            return self.settle(dict(row), receipt, wait_s=0, sweeping=True)
        except Exception:  # the next look tries it again; the rows after it are settled now
            log.exception("session=%s step=%s late effect %s not settled", sid, step_id, key)
            return "pending"

    def settle(
        self,
        row: Mapping[str, Any],
        receipt: dict[str, Any],
        *,
        wait_s: float | None = None,
        sweeping: bool = False,
    ) -> str:
        """Wait for the session to end (``wait_s``, default ``settle_s``), then settle the
        late effect; its status.

        A compensation this worker does not serve fails the row, unless ``sweeping``: a
        sweeper may be a worker of another pool, and leaves the row pending for one that
        serves it."""
        sid, step_id, key = row["session_id"], row["step_id"], row["idempotency_key"]
        wait_s = self.settle_s if wait_s is None else wait_s
        ended = self._wait_for_end(sid, wait_s)
        if ended is None:
            log.warning(
                "session=%s step=%s late effect %s still pending: the session did not end "
                "within %.0fs",
                sid,
                step_id,
                key,
                wait_s,
            )
            return "pending"
        match = _TURN.search(key)
        turn = int(match["turn"]) if match else None
        how = settlement(ended, step_id, turn)
        if how == "ending":
            return self._record(key, "compensated", "ending")
        if how == "kept":
            return self._record(key, "kept", "late")
        try:
            tool, params, error = self._compensation(sid, step_id, row["tool"], receipt, turn)
        except _NotServed as exc:
            if sweeping:
                log.info("session=%s step=%s late effect %s left for %s", sid, step_id, key, exc)
                return "pending"
            tool, params, error = exc.tool, {}, str(exc)
        if not error:
            error = self._run(tool, params, sid, step_id, key)
        status = "failed" if error else "compensated"
        log.warning(
            "session=%s step=%s late effect %s %s after the session ended %s: %s",
            sid,
            step_id,
            key,
            "not compensated" if error else "compensated",
            ended.status,
            error or f"{tool} completed",
        )
        return self._record(key, status, "late", tool=tool, error=error)

    def _wait_for_end(self, sid: str, wait_s: float) -> Ended | None:
        deadline = time.monotonic() + wait_s
        while True:
            with self.ledger.engine.connect() as conn:
                found = conn.execute(
                    select(SessionRow.status, SessionRow.report, SessionRow.options).where(
                        SessionRow.id == sid
                    )
                ).first()
            if found is not None and found.status in ENDED_STATUSES and found.report:
                options = json.loads(found.options or "{}")
                return Ended(
                    found.status,
                    json.loads(found.report),
                    bool(options.get("compensate_on_failure", False)),
                )
            if time.monotonic() >= deadline:
                return None
            time.sleep(self.poll_s)

    def _compensation(
        self, sid: str, step_id: str, tool: str, receipt: dict[str, Any], turn: int | None
    ) -> tuple[str, dict[str, Any], str]:
        """The call that undoes the write: (tool, params, "") or ("", {}, why there is none).

        Raises:
            _NotServed: this worker cannot tell or run the compensation.
        """
        step = self._step(sid, step_id)
        if step is not None and step.compensate is not None:
            undo = step.compensate.tool
            if undo not in self.tools:
                raise _NotServed(f"compensation tool {undo!r} is not served by this worker", undo)
            try:
                params = resolve_params(
                    dict(step.compensate.params), {step_id: receipt}, step_id=step_id
                )
            except Exception as exc:  # reported as the ending reports one it cannot build
                return undo, {}, str(exc)
            return undo, params, ""
        if tool not in self.tools:
            raise _NotServed(f"tool {tool!r} is not served by this worker", "")
        spec = self.tools.get(tool)
        default = spec.compensate
        if spec.side_effect != "write" or not default:
            return default or "", {}, f"{tool!r} has no compensation"
        if default not in self.tools:
            raise _NotServed(f"no compensation of {tool!r} is served by this worker", default)
        accepted = set(self.tools.get(default).param_names()) - {"simulate"}
        known = {**(step.params if step is not None and turn is None else {}), **receipt}
        return default, {k: v for k, v in known.items() if k in accepted}, ""

    def _step(self, sid: str, step_id: str) -> Step | None:
        with self.ledger.engine.connect() as conn:
            text = conn.execute(
                select(PlanVersionRow.plan)
                .where(PlanVersionRow.session_id == sid)
                .order_by(PlanVersionRow.version.desc())
                .limit(1)
            ).scalar_one_or_none()
        if text is None:
            return None
        plan = Plan.model_validate_json(text)
        return next((s for s in plan.steps if s.id == step_id), None)

    def _run(self, tool: str, params: dict[str, Any], sid: str, step_id: str, key: str) -> str:
        """Run the compensation here, through the ledger; "" once it completed, else why."""
        ctx = ToolContext(
            session_id=sid,
            step_id=f"{step_id}~compensate",
            attempt=1,
            idempotency_key=f"{key}:compensate",  # the ending's key: never undone twice
            effects=self.ledger,
        )
        error = ""
        for _ in range(ATTEMPTS):
            try:
                self.tools.get(tool).run(params, ctx)
                return ""
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        return error

    def _record(self, key: str, status: str, by: str, *, tool: str = "", error: str = "") -> str:
        with self.ledger.engine.begin() as conn:
            conn.execute(
                update(LATE)
                .where(LATE.c.idempotency_key == key)
                .values(
                    status=status,
                    settled_by=by,
                    settled_at=time.time(),
                    compensation_tool=tool,
                    error=error[:2000],
                )
            )
        return status
