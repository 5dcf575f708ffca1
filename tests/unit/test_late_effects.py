"""Late effects settled once their session has ended: undone by the ending, kept, or
compensated here when the ending missed them (once, under the ending's own key)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import update

from planloop.core.effects import SqlEffectLedger, _insert_late
from planloop.core.record import Checkpoint, Claim, SqlRecord
from planloop.core.tools import ToolContext, ToolRegistry, tool
from planloop.workers.late_effects import LATE, Ended, LateEffectSettler, settlement

SID = "S1"
PLAN = {"goal": "g", "steps": [{"id": "w", "tool": "t.write", "params": {"label": "x"}}]}


class _Label(BaseModel):
    label: str


def _tools(undone: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @tool(
        "t.write",
        description="a write",
        params=_Label,
        side_effect="write",
        compensate="t.undo",
        registry=registry,
    )
    def write(params: _Label, ctx: ToolContext) -> dict[str, Any]:
        return ctx.effects.apply_once(ctx.idempotency_key, lambda: {"label": params.label}, ctx)

    @tool("t.undo", description="undo", params=_Label, side_effect="write", registry=registry)
    def undo(params: _Label, ctx: ToolContext) -> dict[str, Any]:
        def apply() -> dict[str, Any]:
            undone.append(ctx.idempotency_key)
            return {"undone": params.label}

        return ctx.effects.apply_once(ctx.idempotency_key, apply, ctx)

    return registry


def _ended(
    tmp_path: Path, status: str, compensations: list[dict[str, Any]], *, undo: bool = True
) -> SqlEffectLedger:
    """A record where ``SID`` ended ``status`` with ``compensations``, and a late write of
    step ``w`` committed in its ledger."""
    url = f"sqlite:///{tmp_path / 'record.db'}"
    record = SqlRecord.from_url(url)
    options = json.dumps({"compensate_on_failure": undo})
    fields = {"status": "running", "goal": "g", "options": options}
    record.claim_many([Claim(SID, 1, "me", fields, (1, json.dumps(PLAN)))])
    report = {"status": status, "compensations": compensations}
    done = {"status": status, "report": json.dumps(report), "finished_at": time.time()}
    record.checkpoint(SID, 1, Checkpoint(session=done))
    ledger = SqlEffectLedger(url)
    with ledger.engine.begin() as conn:  # the ledger's own record of a late write
        _insert_late(conn, {"idempotency_key": f"{SID}:w", "session_id": SID, "step_id": "w",
                            "attempt": 1, "tool": "t.write"})  # fmt: skip
    return ledger


def _row() -> dict[str, Any]:
    return {"idempotency_key": f"{SID}:w", "session_id": SID, "step_id": "w", "tool": "t.write"}


def _late(ledger: SqlEffectLedger) -> list[tuple[str, str, str]]:
    rows = SqlRecord(ledger.engine).late_effects(SID)
    return [(r.status, r.settled_by, r.compensation_tool) for r in rows]


def test_a_late_write_the_ending_missed_is_compensated_once_after_it(tmp_path: Path) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, "failed", [])
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle(_row(), {"label": "x"}) == "compensated"
    assert settler.settle(_row(), {"label": "x"}) == "compensated"  # again: nothing undone
    assert undone == [f"{SID}:w:compensate"]  # the ending's key for it
    assert _late(ledger) == [("compensated", "late", "t.undo")]


def test_a_late_write_the_ending_undid_is_not_undone_again(tmp_path: Path) -> None:
    undone: list[str] = []
    by_ending = [{"step": "w", "tool": "t.undo", "status": "completed"}]
    ledger = _ended(tmp_path, "aborted", by_ending)
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle(_row(), {"label": "x"}) == "compensated"
    assert undone == []
    assert _late(ledger) == [("compensated", "ending", "")]


@pytest.mark.parametrize(("status", "undo"), [("completed", True), ("failed", False)])
def test_a_session_that_keeps_its_writes_keeps_a_late_one(
    tmp_path: Path, status: str, undo: bool
) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, status, [], undo=undo)
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle(_row(), {"label": "x"}) == "kept"
    assert undone == []
    assert _late(ledger) == [("kept", "late", "")]


def test_settlement_matches_an_agent_steps_write_by_its_turn() -> None:
    ended = Ended("cancelled", {"compensations": [{"step": "a", "iteration": 2,
                                                   "status": "completed"}]}, False)  # fmt: skip
    assert settlement(ended, "a", 2) == "ending"
    assert settlement(ended, "a", 1) == "undo"
    assert settlement(ended, "a", None) == "undo"


def _left_pending(ledger: SqlEffectLedger, ago_s: float) -> None:
    """The late row as a worker that stopped left it: pending, committed ``ago_s`` ago, its
    receipt in the ledger."""
    with ledger.engine.begin() as conn:
        conn.execute(update(LATE).values(committed_at=time.time() - ago_s))
    ledger.apply_once(f"{SID}:w", lambda: {"label": "x"})  # the receipt committed with it


def test_a_late_write_a_stopped_worker_left_pending_is_settled_by_a_sweep(tmp_path: Path) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, "failed", [])
    _left_pending(ledger, ago_s=10)
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle_left_over() == 1
    assert settler.settle_left_over() == 0  # settled: not looked at again
    assert undone == [f"{SID}:w:compensate"]
    assert _late(ledger) == [("compensated", "late", "t.undo")]


def test_a_sweep_leaves_a_late_write_its_own_settler_may_still_wait_for(tmp_path: Path) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, "failed", [])
    _left_pending(ledger, ago_s=1)  # within settle_s: the worker that recorded it waits
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle_left_over() == 0
    assert undone == []
    assert _late(ledger) == [("pending", "", "")]


def test_a_sweeper_of_another_pool_leaves_a_late_write_to_one_that_serves_its_undo(
    tmp_path: Path,
) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, "failed", [])
    _left_pending(ledger, ago_s=10)
    elsewhere = LateEffectSettler(ledger, ToolRegistry(), settle_s=5, poll_s=0.01)
    assert elsewhere.settle_left_over() == 0
    assert _late(ledger) == [("pending", "", "")]  # not failed: it can still be undone
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle_left_over() == 1
    assert undone == [f"{SID}:w:compensate"]
    assert _late(ledger) == [("compensated", "late", "t.undo")]


def test_the_worker_that_recorded_a_late_write_it_cannot_undo_says_so(tmp_path: Path) -> None:
    ledger = _ended(tmp_path, "failed", [])
    settler = LateEffectSettler(ledger, ToolRegistry(), settle_s=5, poll_s=0.01)
    assert settler.settle(_row(), {"label": "x"}) == "failed"
    rows = SqlRecord(ledger.engine).late_effects(SID)
    assert [(r.status, r.error) for r in rows] == [
        ("failed", "tool 't.write' is not served by this worker")
    ]


def test_a_sweep_looks_past_the_rows_it_leaves_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, "failed", [])
    with ledger.engine.begin() as conn:  # a write of a tool no worker here serves, first
        _insert_late(conn, {"idempotency_key": f"{SID}:v", "session_id": SID, "step_id": "v",
                            "attempt": 1, "tool": "x.write"})  # fmt: skip
    _left_pending(ledger, ago_s=10)
    with ledger.engine.begin() as conn:  # the oldest: the first page
        conn.execute(update(LATE).where(LATE.c.step_id == "v").values(committed_at=1.0))
    monkeypatch.setattr("planloop.workers.late_effects.SWEEP_LIMIT", 1)  # a page per row
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    assert settler.settle_left_over() == 1
    assert undone == [f"{SID}:w:compensate"]
    rows = SqlRecord(ledger.engine).late_effects(SID)
    assert sorted((r.step_id, r.status) for r in rows) == [("v", "pending"), ("w", "compensated")]


def test_a_sweep_goes_on_past_a_row_it_fails_to_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    undone: list[str] = []
    ledger = _ended(tmp_path, "failed", [])
    with ledger.engine.begin() as conn:
        _insert_late(conn, {"idempotency_key": f"{SID}:v", "session_id": SID, "step_id": "v",
                            "attempt": 1, "tool": "t.write"})  # fmt: skip
    _left_pending(ledger, ago_s=10)
    settler = LateEffectSettler(ledger, _tools(undone), settle_s=5, poll_s=0.01)
    real = settler.settle

    def settle(row: Any, receipt: dict[str, Any], **options: Any) -> str:
        if row["step_id"] == "v":
            raise OSError("a row that cannot be settled now")
        return real(row, receipt, **options)

    monkeypatch.setattr(settler, "settle", settle)
    assert settler.settle_left_over() == 1
    assert undone == [f"{SID}:w:compensate"]
