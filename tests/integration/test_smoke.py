"""The smallest end-to-end run: a diamond DAG on real workers and a real supervisor."""

from __future__ import annotations

import pytest

from planloop.core.models import SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.integration.conftest import wait_ended

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

DIAMOND = """
goal: diamond
steps:
  - {id: a, tool: bench.echo, params: {value: {n: 1}}}
  - {id: b, tool: bench.sleep, params: {seconds: 0.1}, dependencies: [a]}
  - {id: c, tool: bench.echo, params: {value: "{{a.output.value.n}}"}, dependencies: [a]}
  - id: d
    tool: bench.echo
    params: {value: ["{{b.output.slept}}", "{{c.output.value}}"]}
    dependencies: [b, c]
"""


def test_diamond_join_sees_both_outputs(stack: Stack, producer: Producer) -> None:
    sid = producer.submit(parse_plan(DIAMOND))
    record = wait_ended(producer, sid)
    assert record.status == SessionStatus.COMPLETED
    assert record.report is not None
    steps = {s["id"]: s for s in record.report["steps"]}
    assert steps["d"]["output"] == {"value": [0.1, 1]}
    assert all(s["status"] == "completed" for s in steps.values())
