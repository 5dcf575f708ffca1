"""A full disk under the SQLite record and effect ledger, end to end (the shipped wheel,
real Redis, Celery workers and SQLite on a small tmpfs this test mounts): while the disk is
full, ledger commits fail as store faults, which open no breaker and skip no write; once
space is freed every session completes with each write applied once (the audit file, on
another disk, counts them). The supervisor's own SQL writes refused meanwhile (checkpoints,
claims, the report) are held and written once the disk frees: the SQL record ends complete,
every attempt row, every event and the report, and no session loop crashed.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planloop.core.effects import EffectAudit
from planloop.core.models import ErrorKind, EventType, SessionRecord, SessionStatus
from planloop.planner.plan import parse_plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps

pytestmark = [pytest.mark.integration]

SESSIONS = 8
DISK = "16m"  # room for the record of a few sessions, and quick to fill

PLAN = """
goal: two writes that must each land once
steps:
  - {id: w1, tool: bench.write, params: {label: one}, max_retries: 1}
  - {id: w2, tool: bench.write, params: {label: two}, dependencies: [w1], max_retries: 1}
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of :data:`DISK` mounted for this test alone (skipped where mount is refused)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; the file, to delete to free it."""
    filler = disk / f"filler-{uuid.uuid4().hex[:6]}"
    with filler.open("wb", buffering=0) as out:
        for size in (65536, 4096, 512, 1):  # down to the last byte: nothing else fits
            _write_until_full(out.fileno(), size)
    return filler


def _write_until_full(fd: int, size: int) -> None:
    block = b"\0" * size
    while True:
        try:
            os.write(fd, block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return


def test_sessions_on_a_full_disk_apply_each_write_once_once_space_is_freed(
    private_stack: MakeStack, small_disk: Path
) -> None:
    built = private_stack(
        database_url=f"sqlite:///{small_disk / 'planloop.db'}",
        store_retry_interval_s=0.5,
        breaker_failures=3,  # a breaker that would open, were a store fault the tool's
    )
    assert built.settings.effect_audit_path is not None  # beside the stack, not on the tmpfs
    audit = EffectAudit(built.settings.effect_audit_path)
    # one session before the disk fills: the record's schema and first pages exist
    warm = built.producer.submit(parse_plan(PLAN))
    assert built.finish(warm, ["w1", "w2"], timeout_s=60).status == SessionStatus.COMPLETED
    filler = fill(small_disk)
    sids = [built.producer.submit(parse_plan(PLAN)) for _ in range(SESSIONS)]
    # while the disk is full, the writes' commits fail and are retried as store faults
    seen: set[str] = set()

    def store_faults() -> bool:
        for sid in sids:
            for step_id, st in built.hot.steps(sid, ["w1", "w2"]).items():
                if st.store_faults or st.error_kind == ErrorKind.STORE:
                    seen.add(f"{sid}:{step_id}")
        return len(seen) >= 2

    wait_for(store_faults, 60, "writes failing on the full disk")
    time.sleep(2)  # a few store retries on a disk that is still full
    assert not any(s.status.ended for s in map(built.producer.session, sids))
    filler.unlink()  # the disk recovers
    ended = [built.finish(sid, ["w1", "w2"], timeout_s=90) for sid in sids]
    assert [r.status for r in ended] == [SessionStatus.COMPLETED] * SESSIONS, [
        r.error for r in ended
    ]
    for record in ended:
        steps = report_steps(record)
        assert {steps[i]["status"] for i in ("w1", "w2")} == {"completed"}, record.error
        assert "failed" not in record.error
    counts = audit.counts()
    keys = [f"{sid}:{step}" for sid in sids for step in ("w1", "w2")]
    assert {key: counts[key] for key in keys} == dict.fromkeys(keys, 1)  # each write once
    assert audit.duplicates() == {}
    breakers = list(built.redis.scan_iter(f"{built.settings.key_prefix}:breaker:*"))
    states = {
        k: built.redis.hget(k, "state")
        for k in breakers
        if built.redis.type(k) in ("hash", b"hash")
    }
    assert "open" not in states.values(), states  # a full disk is not the tool's fault
    for faulted in seen:  # a step the store failed ran again, and that attempt wrote
        sid, step_id = faulted.rsplit(":", 1)
        assert report_steps(built.producer.session(sid))[step_id]["attempts"] >= 2
    # no attempt failed any other way (a transient failure, a timeout, a breaker)
    kinds = {a.error_kind for sid in sids for a in built.record.attempts(sid)}
    assert kinds <= {ErrorKind.STORE, ""}, kinds
    for record in ended:
        assert_record_complete(built, record)
    logs = [log.read_text() for log in built.stack.log_dir.glob("supervisor-*.log")]
    for text in logs:  # a full disk crashes no loop
        crashes = [line for line in text.splitlines() if "loop crashed" in line]
        assert crashes == [], crashes[:3]
    # the supervisor's own writes were refused meanwhile, held, and written afterwards
    assert any("sql store refused" in text for text in logs)
    assert any("sql store writes" in text and "again after" in text for text in logs)


def assert_record_complete(built: Any, record: SessionRecord) -> None:
    """The SQL record of an ended session holds what Redis and the report say happened:
    the ending and its report, a row for every attempt of every step (those the store
    failed too), and the outcome event of each attempt."""
    sid = record.id
    row = built.record.session(sid)
    assert row is not None, sid
    assert row.status == record.status.value, sid
    assert row.report, sid
    assert json.loads(row.report)["status"] == record.status.value, sid
    rows = {(a.step_id, a.attempt): a for a in built.record.attempts(sid)}
    events = {(e.step_id, e.attempt, e.type) for e in built.record.events(sid)}
    for step_id, entry in report_steps(record).items():
        wanted = set(range(1, int(entry["attempts"]) + 1))
        assert {n for s, n in rows if s == step_id} == wanted, (sid, step_id, sorted(rows))
        for n in wanted:
            attempt = rows[(step_id, n)]
            assert attempt.status != "running", (sid, step_id, n)
            outcome = OUTCOME_EVENTS[attempt.status]
            assert (step_id, n, outcome) in events, (sid, step_id, n, outcome, sorted(events))


OUTCOME_EVENTS = {
    "completed": EventType.TASK_COMPLETED,
    "failed": EventType.TASK_FAILED,
    "interrupted": EventType.TASK_INTERRUPTED,
}
