"""Redis behind Sentinel: a master SIGKILLed mid-run costs a few seconds, no session, no
process and no write twice (writes counted by the audit file, outside Redis and SQL)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import redis

from planloop.core.models import SessionRecord, SessionStatus
from planloop.core.redis_client import async_client, parse_redis_url
from planloop.planner.plan import Plan
from planloop.producer.stack import redis_server_binary
from tests.conftest import TEST_REDIS_SERVER, wait_for
from tests.integration.conftest import MakeStack, PrivateStack
from tests.sentinel_cluster import MASTER_NAME, SentinelCluster

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SESSIONS = 4
CHAIN = 5  # writes per session, one after the other
WRITE_S = 0.4


@pytest.fixture
def cluster() -> Iterator[SentinelCluster]:
    # the servers `make test`'s second pass runs on (Redis 6.2), when it names them
    started = SentinelCluster(binary=TEST_REDIS_SERVER or redis_server_binary()).start()
    try:
        yield started
    finally:
        started.stop()


def chain_of_writes(n: int) -> Plan:
    steps: list[dict[str, Any]] = [
        {
            "id": f"w{i}",
            "tool": "bench.write",
            "params": {"label": f"w{i}", "seconds": WRITE_S},
            "dependencies": [f"w{i - 1}"] if i else [],
            "timeout_s": 10,
            "max_retries": 5,
        }
        for i in range(n)
    ]
    return Plan.model_validate({"goal": f"writes across a failover ({n})", "steps": steps})


def audit_lines(ps: PrivateStack) -> list[dict[str, Any]]:
    path = ps.settings.effect_audit_path
    assert path
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ended(ps: PrivateStack, sid: str) -> SessionRecord | None:
    """The session's record once ended; None meanwhile, and while Redis does not answer."""
    with suppress(redis.RedisError):
        record = ps.producer.session(sid)
        return record if record.status.ended else None
    return None


@pytest.mark.timeout(90)
def test_a_master_killed_mid_run_costs_no_session_process_or_double_write(
    cluster: SentinelCluster, private_stack: MakeStack
) -> None:
    ps = private_stack(
        workers=2,
        supervisors=1,
        concurrency=4,
        redis_url=cluster.url,
        redis_sentinel_master=MASTER_NAME,
    )
    plan = chain_of_writes(CHAIN)
    ids = [s.id for s in plan.steps]
    sids = [ps.producer.submit(plan) for _ in range(SESSIONS)]
    # Kill once every session has written something and none has finished.
    wait_for(
        lambda: len({line["key"].split(":")[0] for line in audit_lines(ps)}) == SESSIONS,
        30,
        "every session's first write",
    )
    old_port = cluster.master().port
    killed_at = time.time()
    cluster.kill_master()

    new_port = wait_for(
        lambda: (port := cluster.master_port()) != old_port and port, 20, "a new master"
    )
    promoted_s = time.time() - killed_at
    records = {sid: wait_for(lambda sid=sid: ended(ps, sid), 60, f"{sid} to end") for sid in sids}
    total_s = time.time() - killed_at

    dead = [p.args for p in ps.supervisors + ps.workers if p.poll() is not None]
    assert not dead, f"processes exited over the failover: {dead}"
    for sid, record in records.items():
        assert record.status == SessionStatus.COMPLETED, f"{sid}: {record.error}"
    audit = ps.effects.audit
    assert audit is not None
    assert audit.duplicates() == {}, "writes applied twice across the failover"
    assert set(audit.counts()) == {f"{sid}:{i}" for sid in sids for i in ids}
    # A step started after the promotion went the whole way: the supervisor's dispatch,
    # the worker's broker connection and its claim script, all on the new master.
    promoted_at = killed_at + promoted_s
    restarted = min(
        a.started_at for sid in sids for a in ps.record.attempts(sid) if a.started_at > promoted_at
    )
    print(
        f"\nsentinel failover: master :{old_port} killed; new master :{new_port} after "
        f"{promoted_s:.2f} s; first step started on it {restarted - killed_at:.2f} s after the "
        f"kill; {SESSIONS} sessions x {CHAIN} writes done {total_s:.2f} s after the kill"
    )


@pytest.mark.timeout(60)
def test_async_connections_busy_during_a_failover_leave_the_old_master(
    cluster: SentinelCluster,
) -> None:
    """A planned failover (``SENTINEL FAILOVER``) keeps the old master alive, demoted to a
    replica: no connection may stay on it (stale reads, READONLY on writes)."""
    address = parse_redis_url(cluster.url, master=MASTER_NAME)
    old_port = cluster.master().port

    async def run() -> tuple[int, set[int], int, float, float]:
        client = async_client(address, decode_responses=True, max_connections=16, timeout=5)
        done = 0
        stop = asyncio.Event()

        async def writer() -> None:
            nonlocal done
            while not stop.is_set():
                with suppress(redis.ConnectionError):  # a try beyond the client's retry
                    await client.incr("sentinel-test:n")
                    done += 1
                await asyncio.sleep(0.005)

        tasks = [asyncio.create_task(writer()) for _ in range(8)]
        await asyncio.sleep(0.3)
        sentinel = cluster.sentinels[0].client()
        sentinel.execute_command("SENTINEL", "FAILOVER", MASTER_NAME)
        sentinel.close()
        asked = time.monotonic()
        deadline = asked + 20
        while cluster.master_port() == old_port and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        promoted_s = time.monotonic() - asked
        # The sentinels demote the old master some time after promoting the new one.
        while cluster.role(old_port) != "slave" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        demoted_s = time.monotonic() - asked
        await asyncio.sleep(1.5)  # writes go on, against the new master only
        stop.set()
        await asyncio.gather(*tasks)
        pool: Any = client.connection_pool
        ports = {c.port for c in pool._available_connections if c.is_connected}
        value = int(await client.get("sentinel-test:n") or 0)
        await client.aclose()
        return done, ports, value, promoted_s, demoted_s

    done, ports, value, promoted_s, demoted_s = asyncio.run(run())
    new_port = cluster.master_port()
    assert new_port != old_port, "the failover did not happen"
    assert ports <= {new_port}, f"connections still on the old master :{old_port}: {ports}"
    # Writes the old master took after the promotion are lost (asynchronous replication, and
    # the pools notice within MASTER_CHECK_S): the SQL record covers what Planloop needs.
    print(
        f"\nplanned failover: new master after {promoted_s:.2f} s, old one demoted after "
        f"{demoted_s:.2f} s; {max(0, done - value)} of {done} acknowledged INCRs lost"
    )
