"""Big values: hot copies of outputs expire, and every reader falls back to the SQL record."""

from __future__ import annotations

import json

import pytest

from planloop.core.hot_state import blob_digest, dumps
from planloop.planner.plan import parse_plan
from planloop.producer.views import print_show
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps

pytestmark = pytest.mark.integration

VALUE = {"n": 42, "text": "y" * 1_000}  # under the report's preview limit
PLAN = parse_plan(
    f"""
goal: a value that outlives its hot copy
steps:
  - id: make
    tool: bench.echo
    params: {{value: {json.dumps(VALUE)}}}
  - id: use
    tool: bench.echo
    params: {{value: "{{{{make.output.value.n}}}}"}}
    dependencies: [make]
    requires_approval: true
"""
)


def test_an_expired_output_is_read_from_sql_by_dispatch_report_and_show(
    private_stack: MakeStack, capsys: pytest.CaptureFixture[str]
) -> None:
    ps = private_stack(blob_ttl_s=600)
    sid = ps.producer.submit(PLAN)
    blob_key = ps.keys.blob(blob_digest(dumps({"value": VALUE})))

    ref = blob_digest(dumps({"value": VALUE}))

    def stored_in_sql() -> bool:
        return ref in ps.record.outputs(sid, [ref])

    wait_for(stored_in_sql, 30, "make's output in the SQL record")
    ttl = ps.redis.ttl(blob_key)
    assert 0 < ttl <= 600, f"the blob's TTL is {ttl}"

    # It expires (simulated); a takeover re-checkpoints the completed step meanwhile, which
    # must keep the durable copy rather than overwrite it with nothing.
    assert ps.redis.delete(blob_key) == 1
    ps.signal(ps.supervisors[0])  # SIGKILL
    ps.start_supervisor()
    wait_for(lambda: 2 in ps.takeovers(sid), 30, "the takeover")
    ps.producer.approve(sid, None, "go", step="use")
    record = ps.finish(sid, ["make", "use"], timeout_s=60)

    assert record.status.value == "completed", record.error
    steps = report_steps(record)
    assert steps["use"]["output"] == {"value": 42}, "the reference was resolved from SQL"
    assert steps["make"]["output"]["value"]["n"] == 42, "the report read the output from SQL"
    assert json.loads(ps.record.outputs(sid, [ref])[ref]) == {"value": VALUE}

    capsys.readouterr()
    print_show(ps.producer, sid, as_json=True)
    shown = json.loads(capsys.readouterr().out)
    shown_steps = {s["id"]: s for s in shown["report"]["steps"]}
    assert shown_steps["make"]["output"]["value"]["n"] == 42
    assert shown_steps["use"]["output"] == {"value": 42}
