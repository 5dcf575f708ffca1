"""Prometheus metrics on the real stack: scrape a worker's and a supervisor's ``/metrics``
after a session and find the counters moved (threads and prefork pools alike)."""

from __future__ import annotations

import urllib.request
from contextlib import suppress

import pytest
from prometheus_client.parser import text_string_to_metric_families

from planloop.core.heartbeat import live_workers
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack
from tests.integration.test_flower import free_port

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
SHARED = ("planloop_queue_depth", "planloop_sessions_active")


def scrape(port: int) -> Samples | None:
    """Every sample at ``/metrics``, by name and labels; None while nothing answers."""
    with suppress(OSError):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
    return None


PLAN = {
    "goal": "one step fails for good, the others complete",
    "steps": [
        {"id": "a", "tool": "bench.echo", "params": {"value": 1}},
        {"id": "b", "tool": "bench.echo", "params": {"value": 2}, "dependencies": ["a"]},
        {
            "id": "broken",
            "tool": "bench.sleep",
            "params": {"seconds": 0.01, "simulate": {"fail_attempts": [1], "permanent": True}},
        },
    ],
}


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_worker_and_supervisor_metrics_move_with_a_session(
    private_stack: MakeStack, pool: str
) -> None:
    worker_port, supervisor_port = free_port(), free_port()
    stack = private_stack(
        workers=0,
        metrics_port=worker_port,
        supervisor_metrics_port=supervisor_port,
        metrics_address="127.0.0.1",
    )
    stack.start_worker(concurrency=2, pool=pool)
    wait_for(lambda: scrape(worker_port), 30, "the worker's /metrics")
    wait_for(lambda: scrape(supervisor_port), 30, "the supervisor's /metrics")

    sid = stack.producer.submit(Plan.model_validate(PLAN))
    record = stack.finish(sid, ["a", "b", "broken"])
    assert record.status == SessionStatus.COMPLETED

    worker = scrape(worker_port)
    assert worker is not None
    echo = (("status", "completed"), ("tool", "bench.echo"))
    assert worker[("planloop_steps_total", echo)] == 2
    broken = (("status", "failed"), ("tool", "bench.sleep"))
    assert worker[("planloop_steps_total", broken)] == 1
    assert worker[("planloop_step_duration_seconds_count", (("tool", "bench.echo"),))] == 2
    assert worker[("planloop_dispatch_overhead_seconds_count", ())] == 3
    # read from shared state: a supervisor's to export, not every process's (SharedGauges)
    assert not [k for k in worker if k[0] in SHARED]

    def session_counted() -> Samples | None:
        samples = scrape(supervisor_port) or {}
        key = ("planloop_sessions_ended_total", (("status", "completed"),))
        return samples if samples.get(key) == 1 else None

    supervisor = wait_for(session_counted, 10, "the supervisor to count the session")
    assert supervisor[("planloop_sessions_active", ())] == 0
    assert supervisor[("planloop_queue_depth", (("queue", stack.settings.queue),))] == 0
    # Per queue: the worker's pool queue (core/routing.py), its depth and what went to it.
    (beat,) = live_workers(stack.redis, stack.keys, stack.settings.queue)
    (pool_queue,) = beat.queues
    assert supervisor[("planloop_queue_depth", (("queue", pool_queue),))] == 0
    assert supervisor[("planloop_steps_dispatched_total", (("queue", pool_queue),))] == 3
    decisions = {k: v for k, v in supervisor.items() if k[0] == "planloop_decisions_total"}
    assert sum(decisions.values()) >= 1  # the rule policy's verdict on the failed step


SLOW = {
    "goal": "runs while the metrics are read",
    "steps": [
        {"id": "slow", "tool": "bench.sleep", "params": {"seconds": 30}},
    ],
}


def total(samples: list[Samples], name: str) -> float:
    """What a dashboard's ``sum`` over every scraped process shows."""
    return sum(v for each in samples for (n, _), v in each.items() if n == name)


def test_shared_gauges_add_up_across_two_supervisors(private_stack: MakeStack) -> None:
    worker_port, ports = free_port(), [free_port(), free_port()]
    stack = private_stack(
        workers=0, supervisors=0, metrics_port=worker_port, metrics_address="127.0.0.1"
    )
    stack.start_worker(concurrency=2)
    for port in ports:
        stack.stack.start_supervisor(env={"PLANLOOP_SUPERVISOR_METRICS_PORT": str(port)})
    for port in (worker_port, *ports):
        wait_for(lambda port=port: scrape(port), 30, f"/metrics on {port}")

    sid = stack.producer.submit(Plan.model_validate(SLOW))
    wait_for(
        lambda: stack.hot.steps(sid, ["slow"])["slow"].status.value == "running",
        30,
        "the slow step to run",
    )
    for _ in range(3):  # every scrape, whichever supervisor answers first
        scraped = [scrape(p) or {} for p in (worker_port, *ports)]
        assert total(scraped, "planloop_sessions_active") == 1
        exporters = [s for s in scraped if any(n in SHARED for n, _ in s)]
        assert len(exporters) == 1  # one supervisor holds the shared gauges' lease
        assert total(scraped, "planloop_queue_depth") == 0  # the one step is running
    stack.producer.cancel(sid, "measured")
    wait_for(
        lambda: total([scrape(p) or {} for p in ports], "planloop_sessions_active") == 0,
        30,
        "the session to end",
    )
