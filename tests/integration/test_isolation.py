"""Sessions do not see each other, and a stale owner cannot write a session's hot state."""

from __future__ import annotations

import asyncio

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError
from planloop.core.hot_state import HotState
from planloop.core.keys import Keys
from planloop.core.models import EventType, SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from planloop.supervisor.io.redis_store import SessionStore
from tests.integration.conftest import report_steps, wait_ended

pytestmark = pytest.mark.integration

TWIN = """
goal: twin {tag}
steps:
  - {{id: a, tool: bench.echo, params: {{value: {{tag: {tag}}}}}}}
  - {{id: b, tool: bench.sleep, params: {{seconds: {seconds}}}, dependencies: [a]}}
  - {{id: c, tool: bench.echo, params: {{value: "{{{{a.output.value.tag}}}}"}}, dependencies: [b]}}
"""


def test_two_sessions_at_once_do_not_see_each_other(
    stack: Stack, producer: Producer, hot_state: HotState
) -> None:
    sids = {
        tag: producer.submit(parse_plan(TWIN.format(tag=tag, seconds=seconds)))
        for tag, seconds in (("left", 0.05), ("right", 0.08))
    }
    records = {tag: wait_ended(producer, sid) for tag, sid in sids.items()}

    refs: dict[str, set[str]] = {}
    for tag, record in records.items():
        assert record.status == SessionStatus.COMPLETED, record.error
        steps = report_steps(record)
        assert steps["a"]["output"] == {"value": {"tag": tag}}
        assert steps["c"]["output"] == {"value": tag}
        events = [e for _, e in hot_state.events(sids[tag])]
        # One completion per step of this session, nothing else.
        assert sorted((e.type, e.step_id, e.attempt) for e in events) == [
            (EventType.TASK_COMPLETED, step_id, 1) for step_id in ("a", "b", "c")
        ]
        states = hot_state.steps(sids[tag], ["a", "b", "c"])
        refs[tag] = {st.output_ref for st in states.values()}
        assert {e.payload["output_ref"] for e in events} == refs[tag]
    # Different params give different outputs: no event of one names an output of the other.
    assert not refs["left"] & refs["right"]


def test_stale_epoch_cannot_write_hot_state(
    redis_client: redis.Redis, test_settings: Settings, run_id: str
) -> None:
    keys = Keys(test_settings.key_prefix)
    sid = f"{run_id}-fence"
    redis_client.hset(keys.session(sid), mapping={"status": "running", "epoch": 3})
    target = keys.step(sid, "x")

    async def attempt_writes() -> None:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        try:
            with pytest.raises(FencedOutError, match="epoch 2 is stale"):
                await store.write(sid, 2, [store.step_write(sid, "x", note="stale")])
            await store.write(sid, 3, [store.step_write(sid, "x", status="owner")])
        finally:
            await store.r.aclose()

    asyncio.run(attempt_writes())

    assert redis_client.hget(target, "status") == "owner"
    assert redis_client.hget(target, "note") is None, "the stale write went through"
    redis_client.delete(keys.session(sid), target)
