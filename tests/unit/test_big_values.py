"""Big values: Flower's preview of a task's arguments is bounded; SQL keeps outputs by ref."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from planloop.core.hot_state import blob_digest, dumps
from planloop.core.record import BlobRow, Checkpoint, SqlRecord
from planloop.supervisor.io.step_queue import ARGSREPR_CHARS, _preview


def test_a_big_argsrepr_becomes_a_preview_that_says_so() -> None:
    small = '[{"params": {"a": 1}}]'
    assert _preview(small) == small
    big = '[{"params": {"text": "' + "x" * 100_000 + '"}}]'
    shown = _preview(big)
    assert len(shown) < ARGSREPR_CHARS + 100
    assert shown.startswith(big[:ARGSREPR_CHARS])
    assert f"truncated: {len(big)} chars in all" in shown


def test_the_record_stores_an_output_once_by_its_content_address(tmp_path: Path) -> None:
    record = SqlRecord.from_url(f"sqlite:///{tmp_path / 'record.db'}")
    output = dumps({"n": 42})
    ref = blob_digest(output)
    for sid in ("s1", "s2"):  # the same output made by two sessions
        record.claim(sid, 1, owner="me", fields={"status": "running"})
        row = {"step_id": "a", "attempt": 1, "status": "completed", "output_ref": ref}
        record.checkpoint(sid, 1, Checkpoint(attempts=[row], blobs={ref: output}))
    record.checkpoint("s1", 1, Checkpoint(blobs={ref: output}))  # again: nothing changes

    assert record.outputs("s1", [ref, "missing"]) == {ref: output}
    assert record.outputs("s2", [ref]) == {ref: output}
    assert record.outputs("s1", []) == {}
    with record.engine.connect() as db:
        assert db.execute(select(func.count()).select_from(BlobRow)).scalar_one() == 1
    assert all(a.output is None for a in record.attempts("s1")), "no copy per attempt row"


def test_an_output_in_an_older_records_attempt_row_is_still_found(tmp_path: Path) -> None:
    record = SqlRecord.from_url(f"sqlite:///{tmp_path / 'record.db'}")
    record.claim("s1", 1, owner="me", fields={"status": "running"})
    output = dumps({"n": 7})
    ref = blob_digest(output)
    row = {"step_id": "a", "attempt": 1, "status": "completed", "output_ref": ref}
    record.checkpoint("s1", 1, Checkpoint(attempts=[{**row, "output": output}]))
    assert record.outputs("s1", [ref]) == {ref: output}
    assert record.outputs("s2", [ref]) == {}, "an attempt row answers for its session only"
