"""A session that spent its re-plan budget waits for a person when configured to."""

from __future__ import annotations

import pytest

from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import parse_plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, report_steps, wait_ended

pytestmark = pytest.mark.integration

PLAN = """
steps:
  - id: broken
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    critical: true
    fallback:
      - {id: alt, tool: bench.echo, params: {value: alternative}}
  - {id: after, tool: bench.echo, params: {value: done}, dependencies: [broken]}
"""


def test_a_spent_budget_waits_for_approval_and_then_does_what_the_person_chose(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(approval_on_budget=True)
    sid = ps.producer.submit(parse_plan(PLAN), SessionOptions(max_replans=0))

    def waiting() -> bool:
        notes = [n.get("kind") for _, n in ps.hot.progress(sid)]
        return "approval_required" in notes and ps.producer.session(sid).awaiting == "approval"

    wait_for(waiting, 20, "the session to wait for a person")
    assert not ps.producer.session(sid).status.ended
    pending = {i for i, st in ps.hot.steps(sid, ["broken", "after"]).items() if st.attempt == 0}
    assert pending == {"after"}  # nothing ran past the failed step while it waited

    ps.producer.approve(sid, "replan_remaining", "use the fallback anyway")
    record = wait_ended(ps.producer, sid, 20)

    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    assert steps["alt"]["status"] == "completed"
    assert steps["after"]["status"] == "completed"
    assert record.plan_version == 2
    sources = [(d.source, d.action) for d in ps.record.decisions(sid)]
    assert sources == [("await_human", "CONTINUE"), ("human", "REPLAN_REMAINING")]
