"""The durable SQL record: what a session leaves in SQLite and PostgreSQL, and its fencing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import delete

from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError
from planloop.core.heartbeat import live_workers
from planloop.core.hot_state import HotState
from planloop.core.keys import Keys
from planloop.core.models import SessionStatus
from planloop.core.record import (
    Checkpoint,
    DecisionRow,
    EventRow,
    PlanVersionRow,
    SessionRow,
    SqlRecord,
    StepAttemptRow,
)
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import local_stack
from tests.conftest import TEST_PG_URL, wait_for
from tests.integration.conftest import RunPlan, _delete_prefix, report_steps, wait_ended
from tests.shipped import shipped

pytestmark = pytest.mark.integration

# A chain with one retried write: deterministic event order, two attempts of one step.
CHAIN = """
goal: the record of a chain
steps:
  - {id: a, tool: bench.echo, params: {value: {n: 1}}}
  - id: b
    tool: bench.write
    params: {label: pay, simulate: {fail_attempts: [1]}}
    dependencies: [a]
  - {id: c, tool: bench.sleep, params: {seconds: 0.01}, dependencies: [b]}
"""

# A branch that fails for good, so the supervisor itself appends DEPENDENCY_BROKEN.
BROKEN_BRANCH = """
goal: the record of a skipped branch
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - id: b
    tool: bench.sleep
    params: {simulate: {fail_attempts: [1], permanent: true}}
    dependencies: [a]
  - {id: c, tool: bench.echo, params: {value: 2}, dependencies: [b]}
"""


def recorded(record: SqlRecord, sid: str) -> SessionRow:
    """The session's SQL row once the supervisor has checkpointed its end."""

    def ended() -> SessionRow | None:
        row = record.session(sid)
        return row if row is not None and SessionStatus(row.status).ended else None

    row = wait_for(ended, 15, f"session {sid} to end in the SQL record")
    assert row is not None
    return row


def shape(record: SqlRecord, sid: str) -> dict[str, Any]:
    """What must match between two runs of one plan, whatever the database."""
    row = recorded(record, sid)
    return {
        "status": row.status,
        "plan_versions": [(p.version, p.reason) for p in record.plan_versions(sid)],
        "attempts": [(a.step_id, a.attempt, a.status, a.error_kind) for a in record.attempts(sid)],
        "events": [(e.type, e.step_id, e.attempt) for e in record.events(sid)],
    }


def stored_outputs(record: SqlRecord, sid: str) -> dict[str, str]:
    """Step id -> the output its completed attempt stored (the blobs table, by digest)."""
    done = [a for a in record.attempts(sid) if a.status == "completed" and a.output_ref]
    texts = record.outputs(sid, [a.output_ref for a in done])
    return {a.step_id: texts[a.output_ref] for a in done if a.output_ref in texts}


def stream_length(client: redis.Redis, keys: Keys, sid: str) -> int:
    return int(client.xlen(keys.events(sid)))


def test_sqlite_record_holds_the_session(
    run_plan: RunPlan,
    record: SqlRecord,
    redis_client: redis.Redis,
    test_settings: Settings,
) -> None:
    sid, hot = run_plan(CHAIN)
    assert hot.status == SessionStatus.COMPLETED, hot.error

    row = recorded(record, sid)
    assert row.status == "completed"
    assert row.epoch >= 1
    assert row.report is not None
    assert json.loads(row.report) == hot.report
    plans = record.plan_versions(sid)
    assert [p.version for p in plans] == [1]
    assert [s["id"] for s in json.loads(plans[0].plan)["steps"]] == ["a", "b", "c"]

    attempts = {(a.step_id, a.attempt): a for a in record.attempts(sid)}
    assert sorted(attempts) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    steps = report_steps(hot)
    outputs = record.outputs(sid, [a.output_ref for a in attempts.values()])
    for step_id in ("a", "b", "c"):
        last = attempts[(step_id, steps[step_id]["attempts"])]
        assert last.status == "completed"
        assert json.loads(outputs[last.output_ref]) == steps[step_id]["output"]
        assert last.started_at == pytest.approx(steps[step_id]["started_at"])
    assert attempts[("b", 1)].error_kind == "transient"

    events = record.events(sid)
    assert len(events) == stream_length(redis_client, Keys(test_settings.key_prefix), sid)
    assert [(e.type, e.step_id, e.attempt) for e in events] == [
        ("TASK_COMPLETED", "a", 1),
        ("TASK_FAILED", "b", 1),
        ("TASK_COMPLETED", "b", 2),
        ("TASK_COMPLETED", "c", 1),
    ]


def test_a_retried_attempt_stays_failed_in_the_record(run_plan: RunPlan, record: SqlRecord) -> None:
    sid, hot = run_plan(CHAIN)
    assert hot.status == SessionStatus.COMPLETED, hot.error

    recorded(record, sid)
    first = {(a.step_id, a.attempt): a for a in record.attempts(sid)}.get(("b", 1))
    assert first is not None, "attempt 1 of b left no row in the record"
    # The attempt failed; the retry it led to is attempt 2's business.
    assert first.status == "failed", f"attempt 1 of b recorded as {first.status!r}"
    assert "injected failure" in first.error


def test_every_stream_event_reaches_the_record(
    run_plan: RunPlan,
    record: SqlRecord,
    hot_state: HotState,
) -> None:
    sid, hot = run_plan(BROKEN_BRANCH)
    assert hot.status == SessionStatus.COMPLETED, hot.error

    recorded(record, sid)
    in_stream = [(e.type.value, e.step_id) for _, e in hot_state.events(sid)]
    in_sql = [(e.type, e.step_id) for e in record.events(sid)]
    assert ("DEPENDENCY_BROKEN", "b") in in_stream
    assert in_sql == in_stream


def test_stale_epoch_cannot_write_the_sql_record(tmp_path: Path) -> None:
    record = SqlRecord.from_url(f"sqlite:///{tmp_path / 'fence.db'}")
    try:
        record.claim("s1", 1, owner="first", fields={"status": "running"})
        record.claim("s1", 2, owner="second", fields={})
        with pytest.raises(FencedOutError, match="epoch 1 is stale"):
            record.checkpoint("s1", 1, Checkpoint(session={"status": "failed"}))
        with pytest.raises(FencedOutError):
            record.claim("s1", 2, owner="third", fields={})
        record.checkpoint("s1", 2, Checkpoint(session={"error": "fine"}))

        row = record.session("s1")
        assert row is not None
        assert (row.status, row.owner, row.epoch, row.error) == ("running", "second", 2, "fine")
    finally:
        record.engine.dispose()


def test_one_checkpoint_fences_each_row_by_its_own_epoch_and_end(tmp_path: Path) -> None:
    """The bump statements are kept per set of columns: rows with other columns, a stale
    epoch or an ended status in the same transaction are each fenced on their own."""
    record = SqlRecord.from_url(f"sqlite:///{tmp_path / 'many.db'}")
    try:
        for sid in ("a", "b", "c", "d"):
            record.claim(sid, 1, owner="me", fields={"status": "running"})
        record.checkpoint("d", 1, Checkpoint(session={"status": "completed"}))
        fenced = record.checkpoint_many(
            [
                ("a", 1, Checkpoint(session={"error": "one"})),
                ("b", 2, Checkpoint(session={"error": "stale"})),
                ("c", 1, Checkpoint(session={"status": "failed", "error": "two"})),
                ("d", 1, Checkpoint(session={"error": "after the end"})),
                ("a", 1, Checkpoint(session={"replans": 1})),
            ]
        )
        assert fenced == {"b", "d"}
        rows = {sid: record.session(sid) for sid in ("a", "b", "c", "d")}
        seen = {sid: (r.status, r.error, r.replans) for sid, r in rows.items() if r is not None}
        assert seen == {
            "a": ("running", "one", 1),
            "b": ("running", "", 0),
            "c": ("failed", "two", 0),
            "d": ("completed", "", 0),
        }
    finally:
        record.engine.dispose()


@dataclass
class PgStack:
    """A second stack on its own key prefix and queue, recording to PostgreSQL."""

    producer: Producer
    record: SqlRecord
    sids: list[str]


@pytest.fixture
def pg_stack(
    test_settings: Settings,
    redis_client: redis.Redis,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PgStack]:
    prefix = f"{test_settings.key_prefix}pg"
    settings = test_settings.model_copy(
        update={"key_prefix": prefix, "queue": prefix, "database_url": TEST_PG_URL}
    )
    record = SqlRecord.from_url(TEST_PG_URL)
    running = PgStack(Producer.from_settings(settings), record, [])
    try:
        with local_stack(
            settings.to_env(),
            log_dir=tmp_path_factory.mktemp("pglogs"),
            **shipped().stack_options(),
        ):
            # started as the SQLite stack is: its worker serves before the first submit
            # (else the first steps wait for one, and a warning event says so)
            keys = Keys(prefix)
            wait_for(lambda: live_workers(redis_client, keys, prefix), 60, "the worker's heartbeat")
            yield running
    finally:
        with record.engine.begin() as db:
            sids = running.sids
            db.execute(delete(SessionRow).where(SessionRow.id.in_(sids)))
            db.execute(delete(PlanVersionRow).where(PlanVersionRow.session_id.in_(sids)))
            db.execute(delete(StepAttemptRow).where(StepAttemptRow.session_id.in_(sids)))
            db.execute(delete(EventRow).where(EventRow.session_id.in_(sids)))
            db.execute(delete(DecisionRow).where(DecisionRow.session_id.in_(sids)))
        record.engine.dispose()
        running.producer.state.r.close()
        _delete_prefix(redis_client, prefix)
        # Newer kombu also leaves this binding set behind for the queue.
        redis_client.delete(f"_kombu.binding_permanent.{prefix}")


@pytest.mark.postgres
def test_postgres_holds_the_same_record_as_sqlite(
    run_plan: RunPlan, record: SqlRecord, pg_stack: PgStack
) -> None:
    lite_sid, lite = run_plan(CHAIN)
    pg_sid = pg_stack.producer.submit(parse_plan(CHAIN))
    pg_stack.sids.append(pg_sid)
    pg = wait_ended(pg_stack.producer, pg_sid)

    assert lite.status == pg.status == SessionStatus.COMPLETED
    lite_shape, pg_shape = shape(record, lite_sid), shape(pg_stack.record, pg_sid)
    assert pg_shape == lite_shape
    assert len(pg_shape["events"]) == 4
    pg_outputs = stored_outputs(pg_stack.record, pg_sid)
    lite_outputs = stored_outputs(record, lite_sid)
    # b's receipt carries its session's idempotency key; the others must be equal.
    assert pg_outputs.keys() == lite_outputs.keys() == {"a", "b", "c"}
    assert pg_outputs["a"] == lite_outputs["a"]
    assert pg_outputs["c"] == lite_outputs["c"]
    assert json.loads(pg_outputs["b"])["idempotency_key"] == f"{pg_sid}:b"
