"""``planloop worker --pool`` runs the pool it names: prefork, threads and solo each run a
session to its end, and the worker itself reports the pool it runs (Celery's inspect stats)."""

from __future__ import annotations

import signal
import socket
import subprocess
from typing import Any

import psutil
import pytest

from planloop.config.celery import celery_config
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan, parse_plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack

pytestmark = pytest.mark.integration

SHORT = """
goal: a short session
steps:
  - {id: a, tool: bench.sleep, params: {seconds: 0.1}}
  - {id: b, tool: bench.sleep, params: {seconds: 0.1}}
  - {id: c, tool: bench.echo, params: {value: 1}, dependencies: [a, b]}
"""

IMPLEMENTATION = {
    "prefork": "celery.concurrency.prefork:TaskPool",
    "threads": "celery.concurrency.thread:TaskPool",
    "solo": "celery.concurrency.solo:TaskPool",
}


def worker_stats(settings: Any, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The worker's own report of itself, through the broker (retried until it answers)."""
    from celery import Celery

    app = Celery("pool-test", set_as_current=False)
    app.conf.update(celery_config(settings))
    node = f"planloop-{proc.pid}@{socket.gethostname()}"

    def answer() -> dict[str, Any] | None:
        replies = app.control.inspect(destination=[node], timeout=1.0).stats() or {}
        stats: dict[str, Any] | None = replies.get(node)
        return stats

    try:
        return wait_for(answer, timeout_s=30, what=f"inspect stats from {node}")
    finally:
        app.close()


@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
def test_each_pool_runs_a_session_and_is_the_pool_that_runs(
    private_stack: MakeStack, pool: str
) -> None:
    built = private_stack(workers=0)
    worker = built.stack.start_worker(2, pool)
    built.workers.append(worker)

    sid = built.producer.submit(parse_plan(SHORT))
    record = built.finish(sid, ["a", "b", "c"], context=f"--pool {pool}")

    assert record.status == SessionStatus.COMPLETED
    stats = worker_stats(built.settings, worker)
    assert stats["pool"]["implementation"] == IMPLEMENTATION[pool]
    assert stats["pool"]["max-concurrency"] == (1 if pool == "solo" else 2)
    children = psutil.Process(worker.pid).children()
    if pool == "prefork":
        assert len(stats["pool"]["processes"]) == 2
        assert {c.pid for c in children} >= set(stats["pool"]["processes"])
    else:
        assert children == []


def write_chain(steps: int) -> Plan:
    """``steps`` writes, each after the one before, short timeouts so a lost one retries soon."""
    return Plan.model_validate(
        {
            "goal": "writes across a killed worker",
            "steps": [
                {
                    "id": f"w{i}",
                    "tool": "bench.write",
                    "params": {"label": f"w{i}", "seconds": 0.3},
                    "timeout_s": 2,
                    "max_retries": 6,
                    "dependencies": [f"w{i - 1}"] if i else [],
                }
                for i in range(steps)
            ],
        }
    )


@pytest.mark.chaos
@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
def test_a_killed_worker_of_each_pool_loses_nothing_and_applies_nothing_twice(
    private_stack: MakeStack, pool: str
) -> None:
    built = private_stack(workers=0, lease_ttl_s=1.0, watchdog_grace_s=0.5, retry_backoff_s=0.05)
    built.workers.append(built.stack.start_worker(2, pool))
    plan = write_chain(8)
    ids = [s.id for s in plan.steps]
    sid = built.producer.submit(plan)

    wait_for(lambda: len(built.completed(sid, ids)) >= 3, 60, "three writes to complete")
    built.signal(built.workers[-1], signal.SIGKILL)  # the group: prefork children die too
    built.workers.append(built.stack.start_worker(2, pool))
    record = built.finish(sid, ids, 90, context=f"--pool {pool} after a SIGKILL")

    assert record.status == SessionStatus.COMPLETED, record.error
    counts = {i: built.effects.count(f"{sid}:{i}") for i in ids}
    assert all(count == 1 for count in counts.values()), counts
