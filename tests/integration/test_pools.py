"""``planloop worker --pool`` runs the pool it names: prefork, threads and solo each run a
session to its end, and the worker itself reports the pool it runs (Celery's inspect stats)."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import psutil
import pytest

from config.celery import celery_config
from core.models import SessionStatus
from planner.plan import parse_plan
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
