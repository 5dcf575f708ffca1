"""Circuit breakers on the real stack: failures open a tool's breaker, a probe closes it."""

from __future__ import annotations

import pytest

from planloop.core.models import ErrorKind, SessionOptions, SessionStatus, StepStatus
from planloop.planner.plan import parse_plan
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps, wait_ended

pytestmark = pytest.mark.integration

# One step at a time, in plan order: three transient failures of bench.write open its
# breaker; `victim` then fails fast; `pause` (another tool) outlasts the 1 s cool-down, so
# `probe` runs as the half-open probe and closes the breaker.
PLAN = """
goal: a flaky write tool trips its breaker
steps:
  - id: f1
    tool: bench.write
    params: {label: f1, simulate: {fail_attempts: [1]}}
    max_retries: 0
  - id: f2
    tool: bench.write
    params: {label: f2, simulate: {fail_attempts: [1]}}
    max_retries: 0
  - id: f3
    tool: bench.write
    params: {label: f3, simulate: {fail_attempts: [1]}}
    max_retries: 0
  - {id: victim, tool: bench.write, params: {label: victim}, max_retries: 3}
  - {id: pause, tool: bench.sleep, params: {seconds: 1.3}}
  - {id: probe, tool: bench.write, params: {label: probe}, dependencies: [pause]}
"""


def test_failures_open_the_breaker_and_a_probe_closes_it(private_stack: MakeStack) -> None:
    ps = private_stack(
        workers=1,
        supervisors=1,
        breaker_failures=3,
        breaker_window_s=30,
        breaker_cooldown_s=1,
    )
    sid = ps.producer.submit(parse_plan(PLAN), SessionOptions(concurrency=1))

    record = wait_ended(ps.producer, sid, 60)

    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    for failed in ("f1", "f2", "f3"):
        assert steps[failed]["status"] == "failed"
        assert "injected failure" in steps[failed]["error"]
    # Open: the victim failed fast, once (unavailability is not retried), and never ran.
    victim = steps["victim"]
    assert victim["status"] == StepStatus.INTERRUPTED.value
    assert victim["attempts"] == 1
    assert "circuit breaker is open" in victim["error"]
    assert ps.effects.count(f"{sid}:victim") == 0
    # Half-open after the cool-down: the probe ran, succeeded and closed the breaker.
    assert steps["probe"]["status"] == "completed"
    assert ps.effects.count(f"{sid}:probe") == 1
    assert ps.redis.hget(ps.keys.breaker("bench.write"), "state") == "closed"

    wait_for(
        lambda: (row := ps.record.session(sid)) is not None and row.status == "completed",
        10,
        "the SQL record of the end",
    )
    rows = {(a.step_id, a.attempt): a for a in ps.record.attempts(sid)}
    assert rows[("victim", 1)].error_kind == ErrorKind.UNAVAILABLE.value
    # The decision that followed was told what happened: the victim's tool was unavailable.
    told = [
        e
        for e in ps.record.events(sid)
        if e.step_id == "victim" and '"error_kind": "unavailable"' in e.payload
    ]
    assert told, "no event says the tool was unavailable"
    decisions = ps.record.decisions(sid)
    assert any("TASK_INTERRUPTED" in d.reasoning for d in decisions), [
        d.reasoning for d in decisions
    ]
