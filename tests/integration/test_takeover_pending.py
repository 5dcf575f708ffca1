"""A successor takes over the events its dead predecessor read but never acknowledged.

``make test`` runs this on both Redis lines: XAUTOCLAIM, which the takeover rests on, replies
with two elements on Redis 6.2 (the line ``planloop up`` embeds) and three from Redis 7 on.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from typing import Any, cast

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.models import SessionStatus
from planloop.planner.plan import parse_plan
from planloop.supervisor.io.redis_store import SessionStore
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

GATED = """
steps:
  - {id: a, tool: bench.write, params: {label: a}}
  - {id: b, tool: bench.write, params: {label: b}, dependencies: [a], requires_approval: true}
"""


def pending_by_consumer(client: redis.Redis, stream: str) -> dict[str, str]:
    """Entry id -> the consumer that holds it, for every pending entry of the events group."""
    rows = cast(list[dict[str, Any]], client.xpending_range(stream, EVENTS_GROUP, "-", "+", 10_000))
    return {str(r["message_id"]): str(r["consumer"]) for r in rows}


def test_a_successor_applies_the_events_a_killed_owner_left_unacknowledged(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1)
    sid = ps.producer.submit(parse_plan(GATED))
    stream = ps.keys.events(sid)
    wait_for(
        lambda: ps.hot.steps(sid, ["b"])["b"].note == "awaiting approval",
        30,
        "step b to wait for approval",
    )
    owner = ps.hot.session(sid).owner
    victim = ps.owner_process(sid)
    assert victim is not None, "the session has no live owner"
    ps.signal(victim, signal.SIGKILL)
    # The owner died between reading the approval and acknowledging it: that window is too
    # short to hit by timing, so the approval is read under the dead owner's consumer name.
    approval = ps.producer.approve(sid, step="b", note="go on")
    ps.redis.xreadgroup(EVENTS_GROUP, owner, {stream: ">"}, count=100)
    assert pending_by_consumer(ps.redis, stream).get(approval) == owner

    heir = ps.start_supervisor()
    record = ps.finish(sid, ["a", "b"], 60, "after the takeover")

    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    assert (steps["b"]["status"], steps["b"]["attempts"]) == ("completed", 1), steps["b"]
    assert steps["a"]["attempts"] == 1, "a completed step ran again"
    assert ps.effects.count(f"{sid}:a") == ps.effects.count(f"{sid}:b") == 1
    assert approval in {e.event_id for e in ps.record.events(sid)}, "approval not recorded"
    wait_for(lambda: not pending_by_consumer(ps.redis, stream), 10, "no event left pending")
    assert "crashed" not in ps.supervisor_log(heir)


def test_claim_pending_takes_every_entry_of_a_former_consumer(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    """More entries than one XAUTOCLAIM page (500), one of them deleted from the stream."""
    keys, sid = Keys(test_settings.key_prefix), f"claim-{uuid.uuid4().hex[:8]}"
    stream = keys.events(sid)
    redis_client.xgroup_create(stream, EVENTS_GROUP, id="0", mkstream=True)
    pipe = redis_client.pipeline(transaction=False)
    for i in range(1_201):
        pipe.xadd(stream, {"n": str(i)})
    ids = cast(list[str], pipe.execute())
    redis_client.xreadgroup(EVENTS_GROUP, "former", {stream: ">"}, count=2_000)
    redis_client.xdel(stream, ids[700])

    async def claim() -> list[tuple[str, dict[str, str]]]:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        try:
            return await store.claim_pending(sid, "heir")
        finally:
            await store.r.aclose()

    taken = asyncio.run(claim())

    assert [entry_id for entry_id, _ in taken] == ids[:700] + ids[701:]
    assert [fields["n"] for _, fields in taken[:2]] == ["0", "1"]
    held = pending_by_consumer(redis_client, stream)
    assert {held[i] for i in ids if i != ids[700]} == {"heir"}
