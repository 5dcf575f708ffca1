"""Writes in flight when Redis loses its data (FLUSHALL, restart without persistence) are
applied once: counted by the audit file, outside Redis and SQL."""

from __future__ import annotations

from typing import Any

import pytest

from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan
from tests.conftest import MakeRedis, wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

FAST, SLOW = 4, 4  # writes done before the fault, writes in flight during it


def writes(fast_s: float = 0.3, slow_s: float = 2.0) -> Plan:
    """Independent bench.write steps: ``FAST`` short ones, then ``SLOW`` long ones."""
    steps: list[dict[str, Any]] = [
        {
            "id": f"{kind}{i}",
            "tool": "bench.write",
            "params": {"label": f"{kind}{i}", "seconds": seconds},
            "timeout_s": 10,
            "max_retries": 3,
        }
        for kind, count, seconds in (("fast", FAST, fast_s), ("slow", SLOW, slow_s))
        for i in range(count)
    ]
    return Plan.model_validate({"goal": "writes across a Redis loss", "steps": steps})


def receipts(ps: PrivateStack, sid: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The receipts the SQL ledger holds, by step id."""
    found = {i: ps.effects.receipt(f"{sid}:{i}") for i in ids}
    return {i: r for i, r in found.items() if r is not None}


def durable(ps: PrivateStack, sid: str) -> set[str]:
    """Steps whose completed attempt, output included, is in the SQL record."""
    done = [a for a in ps.record.attempts(sid) if a.status == "completed" and a.output_ref]
    stored = ps.record.outputs(sid, [a.output_ref for a in done])
    return {a.step_id for a in done if a.output_ref in stored}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["flushall", "restart-without-data"])
def test_writes_in_flight_when_redis_loses_its_data_are_applied_once(
    fault: str, private_redis: MakeRedis, private_stack: MakeStack
) -> None:
    server = private_redis()
    ps = private_stack(workers=1, supervisors=1, redis_url=server.url)
    plan = writes()
    ids = [s.id for s in plan.steps]
    fast, slow = ids[:FAST], ids[FAST:]
    sid = ps.producer.submit(plan)
    # The short writes are done and checkpointed (outputs included) before the fault: this
    # test is about the writes in flight, not about outputs that only Redis held.
    wait_for(lambda: durable(ps, sid) >= set(fast), 30, "the short writes to be checkpointed")
    before = receipts(ps, sid, ids)
    in_flight = set(slow) - set(before)
    assert in_flight, "the long writes ended before the fault: nothing was in flight"

    if fault == "flushall":
        ps.redis.flushall()
    else:
        server.restart(keep_data=False)

    # The writes in flight finish after the fault and land in SQL whatever became of Redis.
    after = wait_for(
        lambda: (done := receipts(ps, sid, ids)).keys() == set(ids) and done,
        30,
        "every write to be recorded",
    )
    audit = ps.effects.audit
    assert audit is not None
    assert audit.duplicates() == {}, f"effects applied twice after {fault}"
    # Processes ride out Redis faults: that is what keeps these two alive.
    dead = [p.args for p in ps.supervisors + ps.workers if p.poll() is not None]
    assert not dead, f"processes died of the {fault}: {dead}"
    # The session ends once the supervisor rebuilt it from SQL and re-sent what was running
    # (the attempts whose outcomes the fault dropped run again and meet the ledger).
    record = ps.finish(sid, ids, 60, f"after {fault}")

    assert audit.duplicates() == {}, f"effects applied twice after {fault} and the re-sends"
    assert {key for key in audit.counts() if key.startswith(f"{sid}:")} == {
        f"{sid}:{i}" for i in ids
    }
    assert {i: after[i] for i in before} == before, "a receipt changed after the fault"
    assert record.status == SessionStatus.COMPLETED, record.error
    outputs = {i: s["output"] for i, s in report_steps(record).items()}
    assert outputs == after, "the session reports receipts other than the recorded ones"
