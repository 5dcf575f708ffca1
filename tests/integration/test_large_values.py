"""Large values by reference, on a private Redis so its memory is ours.

A 1 MiB output reaches a dependent step through a reference unchanged while Redis holds one
copy of it, not one per place (blob, task message, step hash, event); a 20 MiB output fails
its step for good with OutputTooLarge, naming the limit and the setting, and is never stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.hot_state import blob_digest
from planloop.core.keys import Keys
from planloop.core.models import StepState, StepStatus
from planloop.core.values import ValueLimits, ValueRef, encode
from planloop.planner.plan import Plan
from planloop.planner.references import resolve_params
from planloop.supervisor.io.big_params import SentParams, send_params
from planloop.supervisor.io.redis_store import SessionStore
from tests.conftest import MakeRedis, wait_for
from tests.integration.conftest import MakeStack, report_steps

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MIB = 1024 * 1024


def stored_bytes(client: redis.Redis) -> int:
    """What every key in Redis takes (MEMORY USAGE, exact): the stored copies, without the
    clients' buffers and the Lua garbage that ``used_memory`` also counts for a while."""
    return sum(
        int(client.memory_usage(key, samples=0) or 0) for key in client.scan_iter(count=1000)
    )


def two_steps(size: int, *, latency_s: float = 0.0) -> Plan:
    after: dict[str, Any] = {
        "id": "after",
        "tool": "bench.digest",
        "params": {"value": "{{big.output.payload}}"},
        "dependencies": ["big"],
    }
    if latency_s:
        after["params"]["simulate"] = {"latency_s": latency_s}
    return Plan.model_validate(
        {
            "goal": "a big output taken whole by the next step",
            "steps": [
                {"id": "big", "tool": "bench.sleep", "params": {"payload_bytes": size}},
                after,
                {"id": "other", "tool": "bench.echo", "params": {"value": 1}},
            ],
        }
    )


def test_a_1_mib_output_reaches_its_dependent_unchanged_as_one_copy_in_redis(
    private_stack: MakeStack, private_redis: MakeRedis
) -> None:
    server = private_redis()
    ps = private_stack(redis_url=server.url)
    size = MIB
    wait_for(lambda: ps.redis.hlen(ps.keys.tools), 30, "the worker's tool catalogue")
    baseline = stored_bytes(ps.redis)

    sid = ps.producer.submit(two_steps(size, latency_s=2.0))

    def after_running() -> bool:
        st = ps.step_states(sid, ["after"])["after"]
        return st.status.value == "running" and st.started_at > 0

    # While the dependent runs, its task message is queued or held as unacked: it must
    # carry a reference, so Redis holds the output once.
    wait_for(after_running, 60, "the dependent step running")
    during = stored_bytes(ps.redis) - baseline
    record = ps.finish(sid, ["big", "after", "other"], timeout_s=60)
    end = stored_bytes(ps.redis) - baseline

    assert record.status.value == "completed", record.error
    expected = encode("x" * size)
    steps = report_steps(record)
    assert steps["after"]["output"] == {
        "sha256": hashlib.sha256(expected.encode()).hexdigest(),
        "bytes": len(expected),
    }, "the dependent step got the value unchanged"
    assert size <= during < 1.6 * size, f"Redis held {during / size:.2f} copies mid-way"
    assert size <= end < 1.6 * size, f"Redis holds {end / size:.2f} copies at the end"
    big_keys = [
        k for k in ps.redis.scan_iter(count=1000) if (ps.redis.memory_usage(k) or 0) > size // 2
    ]
    assert big_keys == [ps.keys.blob(ps.hot.steps(sid, ["big"])["big"].output_ref)]
    big = steps["big"]["output"]
    assert big["truncated"] is True, "the report shows a preview"
    assert big["bytes"] > size
    assert len(big["preview"]) <= 2_000


def test_a_20_mib_output_fails_its_step_for_good_naming_the_limit(
    private_stack: MakeStack, private_redis: MakeRedis
) -> None:
    server = private_redis()
    ps = private_stack(redis_url=server.url)
    size = 20 * MIB
    wait_for(lambda: ps.redis.hlen(ps.keys.tools), 30, "the worker's tool catalogue")
    baseline = stored_bytes(ps.redis)

    sid = ps.producer.submit(two_steps(size))
    record = ps.finish(sid, ["big", "after", "other"], timeout_s=90)

    steps = report_steps(record)
    big = steps["big"]
    assert big["status"] == "failed"
    assert big["attempts"] == 1, "OutputTooLarge is permanent: never retried"
    error = big["error"]
    assert "OutputTooLarge" in error
    assert "'big'" in error
    assert f"{len(encode({'attempt': 1, 'payload': 'x' * size, 'slept': 0.0})):,}" in error
    assert "16,777,216" in error
    assert "PLANLOOP_VALUE_MAX_BYTES" in error
    assert big["output"] is None
    assert steps["after"]["status"] != "completed"
    assert steps["other"]["status"] == "completed", "the rest of the session went on"
    assert record.status.ended
    grown = stored_bytes(ps.redis) - baseline
    assert grown < MIB, f"the refused output left {grown:,} bytes in Redis"
    assert ps.record.outputs(sid, [ps.hot.steps(sid, ["big"])["big"].output_ref]) == {}


def test_dispatch_sends_big_params_as_references_to_one_stored_copy(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(f"{test_settings.key_prefix}-refs-{uuid.uuid4().hex[:6]}")
    output = {"payload": "x" * 2_000, "n": 3}
    stored = encode(output)
    digest = blob_digest(stored)
    step = Plan.model_validate(
        {
            "steps": [
                {"id": "big", "tool": "bench.sleep"},
                {
                    "id": "use",
                    "tool": "bench.echo",
                    "params": {
                        "whole": "{{big.output.payload}}",
                        "text": "said: {{big.output.payload}}",
                        "huge": "{{big.output}}",
                        "small": "{{big.output.n}}",
                    },
                    "dependencies": ["big"],
                },
            ]
        }
    ).steps[1]
    states = {"big": StepState(status=StepStatus.COMPLETED, output_ref=digest)}
    resolved = resolve_params(step.params, {"big": output}, step_id="use")

    async def send() -> SentParams:
        store = SessionStore.from_url(test_settings.redis_url, keys)
        try:
            return await send_params(
                store,
                step,
                resolved,
                states=states,
                outputs={"big": output},
                limits=ValueLimits(inline_max_bytes=1_000, max_bytes=2_010),
                ttl_s=60,
            )
        finally:
            await store.r.aclose()

    # The output's hot copy expired: the dispatch writes it back before sending a reference.
    sent = asyncio.run(send())
    try:
        assert sent.inline == {"small": 3}
        assert sent.refs["whole"] == ValueRef(digest=digest, path=["payload"], size=2_002)
        text = encode("said: " + "x" * 2_000)
        assert sent.refs["text"] == ValueRef(digest=blob_digest(text), size=len(text))
        assert sent.refs["huge"].size == len(stored), "above the hard limit: sent, not stored"
        assert redis_client.get(keys.blob(digest)) == stored
        assert redis_client.get(keys.blob(blob_digest(text))) == text
        assert 0 < redis_client.ttl(keys.blob(digest)) <= 60
        assert len(list(redis_client.scan_iter(match=f"{keys.prefix}:*"))) == 2
    finally:
        for key in redis_client.scan_iter(match=f"{keys.prefix}:*"):
            redis_client.delete(key)
