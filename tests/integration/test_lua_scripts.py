"""The Lua scripts run directly against a real Redis, table by table: breaker transitions,
END_ATTEMPT, the lease scripts, the fenced write and RECORD_OUTCOME.

Each test works under a key prefix of its own and deletes it afterwards. Times are given to
the scripts (started_at, finished_at), so no test waits on a clock.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.lua import (
    EndAttempt,
    FencedWrite,
    LoadStarts,
    RecordOutcome,
    ReleaseLease,
    StartAttempt,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


@dataclass
class Space:
    """One test's corner of Redis, with its scripts loaded."""

    r: redis.Redis
    keys: Keys

    def __post_init__(self) -> None:
        self.release = ReleaseLease.register(self.r)
        self.fenced = FencedWrite.register(self.r)
        self.end = EndAttempt.register(self.r)
        self.start = StartAttempt.register(self.r)
        self.record = RecordOutcome.register(self.r)

    def running_step(self, step: str, *, attempt: int = 1, epoch: int = 1) -> str:
        key = self.keys.step("s", step)
        self.r.hset(key, mapping={"status": "running", "attempt": attempt, "epoch": epoch})
        return key

    def outcome(self, step_key: str, **changes: Any) -> RecordOutcome:
        fields: dict[str, Any] = {
            "step_key": step_key,
            "events_key": self.keys.events("s"),
            "blob_key": self.keys.blob("digest"),
            "breaker_key": self.keys.breaker("tool"),
            "breaker_failures_key": self.keys.breaker_failures("tool"),
            "unacked_key": f"{self.keys.prefix}:unacked",
            "unacked_index_key": f"{self.keys.prefix}:unacked_index",
            "attempt": 1,
            "epoch": 1,
            "status": "completed",
            "finished_at": "100.0",
            "error": "",
            "error_kind": "",
            "output_ref": "",
            "blob": "",
            "breaker_mode": "",
            "window_s": 10,
            "threshold": 2,
            "failure_member": uuid.uuid4().hex,
            "delivery_tag": "",
            "blob_ttl_s": 0,
            "event_fields": ["type", "task_completed", "step_id", "a"],
        }
        return RecordOutcome(**{**fields, **changes})


@pytest.fixture
def space(redis_client: redis.Redis) -> Iterator[Space]:
    prefix = f"lua{uuid.uuid4().hex[:10]}"
    yield Space(redis_client, Keys(prefix))
    stale = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


# --- the circuit breaker -----------------------------------------------------------------
COOLDOWN_S = 5

# One tool's life, in order: (what happens, at time, what the script answers, breaker state
# after). Threshold 2 failures within a 10 s window; open for a 5 s cooldown.
BREAKER_LIFE: list[tuple[str, float, Any, str]] = [
    ("start", 0, 1, "closed"),  # no breaker yet: closed
    ("fail", 1, "event", "closed"),  # one failure is under the threshold
    ("fail", 30, "event", "closed"),  # the first left the window: still one
    ("start", 31, 1, "closed"),
    ("fail", 32, "event", "open"),  # two within the window: open
    ("start", 33, 2, "open"),  # open: the claim fails fast
    ("start", 36.9, 2, "open"),  # still cooling down
    ("start", 37, 3, "half_open"),  # cooldown over: this call is the probe
    ("start", 38, 2, "half_open"),  # one probe at a time
    ("fail", 38.5, "event", "open"),  # the probe failed: open again
    ("start", 40, 2, "open"),
    ("start", 43.5, 3, "half_open"),  # a new probe after the cooldown
    ("ok", 44, "event", "closed"),  # it succeeded: closed, failures forgotten
    ("fail", 45, "event", "closed"),  # one failure after closing is under the threshold
    ("start", 46, 1, "closed"),
]


def test_breaker_transitions(space: Space) -> None:
    breaker = space.keys.breaker("tool")
    for n, (action, at, expected, state) in enumerate(BREAKER_LIFE):
        step_key = space.running_step(f"b{n}")
        if action == "start":
            call = StartAttempt(
                step_key=step_key,
                breaker_key=breaker,
                unacked_key=f"{space.keys.prefix}:unacked",
                unacked_index_key=f"{space.keys.prefix}:unacked_index",
                attempt=1,
                epoch=1,
                worker="w1",
                started_at=repr(at),
                cooldown_s=COOLDOWN_S,
                delivery_tag="",
                unacked_entry="",
            )
            answer = space.start(call)
        else:
            mode = "ok" if action == "ok" else "fail"
            answer = space.record(space.outcome(step_key, finished_at=repr(at), breaker_mode=mode))
            answer = "event" if answer else answer
        row = f"row {n}: {action} at {at}"
        assert answer == expected, row
        assert (space.r.hget(breaker, "state") or "closed") == state, row  # none: closed


def test_a_claim_without_a_breaker_ignores_an_open_one(space: Space) -> None:
    breaker = space.keys.breaker("tool")
    space.r.hset(breaker, mapping={"state": "open", "opened_at": 0})
    call = StartAttempt(
        step_key=space.running_step("a"),
        breaker_key=breaker,
        unacked_key="-",
        unacked_index_key="-",
        attempt=1,
        epoch=1,
        worker="w1",
        started_at="1.0",
        cooldown_s="",  # no breaker policy
        delivery_tag="",
        unacked_entry="",
    )
    assert space.start(call) == 1


# --- claiming an attempt -----------------------------------------------------------------
# (the step hash before, the attempt and epoch claimed, the answer)
CLAIMS: list[tuple[dict[str, Any], int, int, int]] = [
    ({"status": "running", "attempt": 1, "epoch": 1}, 1, 1, 1),
    ({"status": "running", "attempt": 2, "epoch": 1}, 1, 1, 0),  # a retry superseded it
    ({"status": "running", "attempt": 1, "epoch": 2}, 1, 1, 0),  # dispatched by an old owner
    ({"status": "completed", "attempt": 1, "epoch": 1}, 1, 1, 0),
    ({"status": "running", "attempt": 1, "epoch": 1, "started_at": "5.0"}, 1, 1, -1),
]


@pytest.mark.parametrize(("before", "attempt", "epoch", "expected"), CLAIMS)
def test_start_attempt(
    space: Space, before: dict[str, Any], attempt: int, epoch: int, expected: int
) -> None:
    step_key = space.keys.step("s", "a")
    space.r.hset(step_key, mapping=before)
    unacked, index = f"{space.keys.prefix}:unacked", f"{space.keys.prefix}:unacked_index"
    call = StartAttempt(
        step_key=step_key,
        breaker_key=space.keys.breaker("tool"),
        unacked_key=unacked,
        unacked_index_key=index,
        attempt=attempt,
        epoch=epoch,
        worker="w1",
        started_at="10.0",
        cooldown_s="",
        delivery_tag="tag1",
        unacked_entry="entry",
    )

    assert space.start(call) == expected
    # whatever the answer, the broker holds the message again until the outcome
    assert space.r.hget(unacked, "tag1") == "entry"
    assert space.r.zscore(index, "tag1") == 10.0
    claimed = space.r.hget(step_key, "worker") == "w1"
    assert claimed == (expected == 1)


# --- END_ATTEMPT --------------------------------------------------------------------------
# (the session's epoch, the step hash before, the epoch and attempt ended, ended?)
END_CASES: list[tuple[str, int, dict[str, Any], int, int, bool]] = [
    ("the owner ends the running attempt", 3, {"status": "running", "attempt": 2}, 3, 2, True),
    ("a stale owner is refused", 4, {"status": "running", "attempt": 2}, 3, 2, False),
    (
        "an earlier attempt is not the running one",
        3,
        {"status": "running", "attempt": 2},
        3,
        1,
        False,
    ),
    ("a finished step stays finished", 3, {"status": "completed", "attempt": 2}, 3, 2, False),
]


@pytest.mark.parametrize(
    ("case", "owner_epoch", "before", "epoch", "attempt", "ends"),
    END_CASES,
    ids=[case[0] for case in END_CASES],
)
def test_end_attempt(
    space: Space,
    case: str,
    owner_epoch: int,
    before: dict[str, Any],
    epoch: int,
    attempt: int,
    ends: bool,
) -> None:
    session, step_key, events = (
        space.keys.session("s"),
        space.keys.step("s", "a"),
        space.keys.events("s"),
    )
    space.r.hset(session, mapping={"status": "running", "epoch": owner_epoch})
    space.r.hset(step_key, mapping=before)
    call = EndAttempt(
        session_key=session,
        step_key=step_key,
        events_key=events,
        epoch=epoch,
        attempt=attempt,
        status="interrupted",
        error="worker lost",
        error_kind="timeout",
        finished_at="50.0",
        event_fields=["type", "task_interrupted", "step_id", "a"],
    )

    answer = space.end(call)

    step = space.r.hgetall(step_key)
    stream = space.r.xrange(events)
    if ends:
        assert answer
        assert stream[0][0] == answer
        assert stream[0][1] == {"type": "task_interrupted", "step_id": "a"}
        assert step["status"] == "interrupted"
        assert (step["error"], step["error_kind"], step["finished_at"]) == (
            "worker lost",
            "timeout",
            "50.0",
        )
    else:
        assert answer is None
        assert stream == []
        assert step == {k: str(v) for k, v in before.items()}


def test_a_worker_outcome_after_end_attempt_is_dropped(space: Space) -> None:
    session, events = space.keys.session("s"), space.keys.events("s")
    space.r.hset(session, mapping={"status": "running", "epoch": 1})
    step_key = space.running_step("a")
    ended = space.end(
        EndAttempt(
            session_key=session,
            step_key=step_key,
            events_key=events,
            epoch=1,
            attempt=1,
            status="interrupted",
            error="gave up",
            error_kind="timeout",
            finished_at="5.0",
            event_fields=["type", "task_interrupted"],
        )
    )

    late = space.record(space.outcome(step_key, finished_at="6.0"))

    assert ended
    assert late is None
    assert space.r.hget(step_key, "status") == "interrupted"
    assert space.r.xlen(events) == 1


# --- leases -------------------------------------------------------------------------------
def test_a_lease_is_released_only_by_its_token(space: Space) -> None:
    lease = space.keys.lease("s")
    space.r.set(lease, "A", px=60_000)

    assert space.release(ReleaseLease(lease_key=lease, token="B")) == 0
    assert space.r.get(lease) == "A"
    assert space.release(ReleaseLease(lease_key=lease, token="A")) == 1
    assert not space.r.exists(lease)
    assert space.release(ReleaseLease(lease_key=lease, token="A")) == 0


def test_load_starts_reads_plans_makes_groups_and_counts_pending(space: Space) -> None:
    """Per session, in order: its plan (nil when that version is not stored) and its events
    delivered and not acknowledged; a lost events group is made again, an existing one
    (with its pending entries) is left as it is."""
    k = space.keys
    space.r.set(k.plan("fresh", 1), '{"goal": "g"}')
    space.r.xgroup_create(k.events("fresh"), EVENTS_GROUP, id="0", mkstream=True)
    space.r.set(k.plan("owned", 2), '{"goal": "h"}')
    space.r.xgroup_create(k.events("owned"), EVENTS_GROUP, id="0", mkstream=True)
    for i in range(3):
        space.r.xadd(k.events("owned"), {"n": str(i)})
    space.r.xreadgroup(EVENTS_GROUP, "former-owner", {k.events("owned"): ">"}, count=2)
    load = LoadStarts.register(space.r)
    session_keys: list[str] = []
    for sid, version in (("fresh", 1), ("owned", 2), ("lost", 1)):
        session_keys += [k.plan(sid, version), k.events(sid)]
    replies = load(LoadStarts(group=EVENTS_GROUP, session_keys=session_keys))
    assert replies == ['{"goal": "g"}', 0, '{"goal": "h"}', 2, None, 0]
    groups = space.r.xinfo_groups(k.events("lost"))
    assert [g["name"] for g in groups] == [EVENTS_GROUP], "the lost group is made again"


def test_load_starts_raises_what_is_not_a_busy_group(space: Space) -> None:
    """An events key of the wrong type is an error for the whole batch (the loops raise it),
    not a session read as fresh."""
    space.r.set(space.keys.events("odd"), "not a stream")
    load = LoadStarts.register(space.r)
    call = LoadStarts(
        group=EVENTS_GROUP, session_keys=[space.keys.plan("odd", 1), space.keys.events("odd")]
    )
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        load(call)


# --- the fenced write ---------------------------------------------------------------------
# (the session before, the epoch writing, applied?)
FENCED_CASES: list[tuple[str, dict[str, Any], int, bool]] = [
    ("the owner's epoch writes", {"status": "running", "epoch": 5}, 5, True),
    ("a stale epoch is refused", {"status": "running", "epoch": 6}, 5, False),
    ("a newer epoch than stored is refused", {"status": "running", "epoch": 5}, 6, False),
    ("an ended session is refused", {"status": "completed", "epoch": 5}, 5, False),
]


@pytest.mark.parametrize(
    ("case", "before", "epoch", "applied"), FENCED_CASES, ids=[c[0] for c in FENCED_CASES]
)
def test_fenced_write(
    space: Space, case: str, before: dict[str, Any], epoch: int, applied: bool
) -> None:
    session, step_key, active = (
        space.keys.session("s"),
        space.keys.step("s", "a"),
        space.keys.active,
    )
    space.r.hset(session, mapping=before)
    ops = [
        ["HSET", 1, "status", "running", "note", 'quote " and \\ kept'],
        ["SADD", 2, "s"],
        ["HSET", 3, "replans", 1],  # the session hash itself, as a target
    ]
    call = FencedWrite(
        session_key=session,
        epoch=epoch,
        ops=json.dumps(ops),
        target_keys=[step_key, active, session],
    )

    assert space.fenced(call) == (1 if applied else 0)
    if applied:
        assert space.r.hgetall(step_key) == {"status": "running", "note": 'quote " and \\ kept'}
        assert space.r.sismember(active, "s")
        assert space.r.hget(session, "replans") == "1"
    else:
        assert not space.r.exists(step_key)
        assert not space.r.sismember(active, "s")
        assert space.r.hget(session, "replans") is None


def test_a_fenced_queue_pushes_its_message_argument_and_holds_the_same_text(
    space: Space,
) -> None:
    session, queue = space.keys.session("s"), f"{space.keys.prefix}:q"
    unacked = f"{space.keys.prefix}:unacked"
    space.r.hset(session, mapping={"status": "running", "epoch": 1})
    first, second = json.dumps({"id": 'a "quoted" id'}), json.dumps({"id": "b\\n"})
    ops = [["QUEUE", 1, 2, 2, "tag-b", '"", "q"'], ["QUEUE", 1, 1, 2, "tag-a", '"", "q"']]
    call = FencedWrite(
        session_key=session,
        epoch=1,
        ops=json.dumps(ops),
        target_keys=[queue, unacked],
        messages=[first, second],
    )

    assert space.fenced(call) == 1
    assert space.r.lrange(queue, 0, -1) == [first, second]  # LPUSH: the last op's on the left
    assert json.loads(space.r.hget(unacked, "tag-a")) == [json.loads(first), "", "q"]
    assert json.loads(space.r.hget(unacked, "tag-b")) == [json.loads(second), "", "q"]


def test_a_fenced_write_refuses_a_command_outside_its_list(space: Space) -> None:
    session = space.keys.session("s")
    space.r.hset(session, mapping={"status": "running", "epoch": 1})
    call = FencedWrite(
        session_key=session, epoch=1, ops=json.dumps([["FLUSHDB", 1]]), target_keys=[session]
    )

    with pytest.raises(redis.ResponseError, match="command not allowed: FLUSHDB"):
        space.fenced(call)


# --- RECORD_OUTCOME -----------------------------------------------------------------------
def test_record_outcome_records_stores_the_output_and_acks(space: Space) -> None:
    step_key = space.running_step("a", attempt=2, epoch=3)
    unacked, index = f"{space.keys.prefix}:unacked", f"{space.keys.prefix}:unacked_index"
    space.r.hset(unacked, "tag1", "entry")
    space.r.zadd(index, {"tag1": 1.0})
    blob = json.dumps({"rows": 3})

    answer = space.record(
        space.outcome(
            step_key,
            attempt=2,
            epoch=3,
            status="completed",
            finished_at="12.5",
            output_ref="digest",
            blob=blob,
            delivery_tag="tag1",
            blob_ttl_s=600,
        )
    )

    step = space.r.hgetall(step_key)
    assert answer == space.r.xrange(space.keys.events("s"))[0][0]
    assert step["status"] == "completed"
    assert (step["finished_at"], step["output_ref"], step["error"]) == ("12.5", "digest", "")
    assert space.r.get(space.keys.blob("digest")) == blob
    assert 0 < space.r.ttl(space.keys.blob("digest")) <= 600
    assert not space.r.hexists(unacked, "tag1")  # acknowledged
    assert space.r.zscore(index, "tag1") is None


# (the step hash before, the attempt and epoch of the outcome)
STALE_OUTCOMES: list[tuple[str, dict[str, Any], int, int]] = [
    ("a later attempt runs", {"status": "running", "attempt": 3, "epoch": 1}, 2, 1),
    ("another owner dispatched it", {"status": "running", "attempt": 2, "epoch": 2}, 2, 1),
    ("the step already ended", {"status": "failed", "attempt": 2, "epoch": 1}, 2, 1),
]


@pytest.mark.parametrize(
    ("case", "before", "attempt", "epoch"), STALE_OUTCOMES, ids=[c[0] for c in STALE_OUTCOMES]
)
def test_a_stale_outcome_is_dropped_but_acked(
    space: Space, case: str, before: dict[str, Any], attempt: int, epoch: int
) -> None:
    step_key = space.keys.step("s", "a")
    space.r.hset(step_key, mapping=before)
    unacked = f"{space.keys.prefix}:unacked"
    space.r.hset(unacked, "tag1", "entry")

    answer = space.record(
        space.outcome(
            step_key,
            attempt=attempt,
            epoch=epoch,
            blob='"x"',
            output_ref="digest",
            delivery_tag="tag1",
            breaker_mode="fail",
        )
    )

    assert answer is None
    assert space.r.hgetall(step_key) == {k: str(v) for k, v in before.items()}
    assert not space.r.exists(space.keys.events("s"), space.keys.blob("digest"))
    assert not space.r.exists(space.keys.breaker("tool"))
    assert not space.r.hexists(unacked, "tag1")


def test_the_same_output_is_stored_once_and_kept_longer(space: Space) -> None:
    blob_key = space.keys.blob("digest")
    for step, ttl in (("a", 100), ("b", 900)):
        space.record(
            space.outcome(
                space.running_step(step), output_ref="digest", blob='"same"', blob_ttl_s=ttl
            )
        )
        assert space.r.get(blob_key) == '"same"'
    assert space.r.ttl(blob_key) > 100  # the second record refreshed the hot copy's TTL
