"""Decisions end to end: the decision agent's REPLAN_FULL and ABORT
paths, and DEPENDENCY_BROKEN reaching it, through a real supervisor, Redis and workers with
the scripted LLM server answering by role."""

from __future__ import annotations

import pytest

from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.models import EventType, SessionOptions, SessionStatus, Severity
from planloop.core.record import SqlRecord
from planloop.producer.client import Producer
from tests.integration.conftest import RunPlan, report_steps
from tests.integration.test_planning_loop import (
    FAIL,
    SIDE_ROLES,
    THREE_STEPS,
    decision,
    echo,
    plan_version,
    prompts,
    run,
)
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration


def test_replan_full_replaces_everything_not_completed(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script("decider", decision("REPLAN_FULL", "the approach is wrong; start over"))
    fresh = {
        "goal": "three steps, the second one fails for good",
        "steps": [echo("n1", "{{s1.output.value}}", "s1"), echo("n2", "done", "n1")],
    }
    llm.script("replanner", fresh)

    sid, session = run(llm_producer, llm_record, THREE_STEPS)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert (session.plan_version, session.replans) == (2, 1)
    steps = report_steps(session)
    assert steps["s1"]["status"] == "completed"
    assert steps["n1"]["output"] == {"value": "first-result"}
    assert steps["n2"]["status"] == "completed"
    assert "s3" not in steps
    assert [s.id for s in plan_version(llm_record, sid, 2).steps] == ["s1", "n1", "n2"]
    assert [(r.action, r.source) for r in llm_record.decisions(sid)] == [("REPLAN_FULL", "llm")]
    roles = [c.role for c in llm_record.llm_calls(sid) if c.role not in SIDE_ROLES]
    assert roles == ["decider", "replanner", "critic", "summarizer"]  # then the round's end
    (replanner_prompt,) = prompts(llm, "replanner")
    assert "first-result" in replanner_prompt  # the completed step's output is shown
    assert llm.pending() == 0


WRITE_THEN_FAIL = f"""
goal: a write, then a critical step that fails for good
steps:
  - {{id: w, tool: bench.write, params: {{label: undo-me}}}}
  - {{id: bad, tool: bench.sleep, params: {FAIL}, dependencies: [w], max_retries: 0,
      critical: true}}
  - {{id: after, tool: bench.echo, params: {{value: 1}}, dependencies: [bad]}}
"""


def test_an_llm_abort_compensates_the_completed_writes(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_effects: SqlEffectLedger,
) -> None:
    llm.script("decider", decision("ABORT", "nothing useful can come of this"))

    sid, session = run(llm_producer, llm_record, WRITE_THEN_FAIL)

    assert session.status == SessionStatus.ABORTED, session.error
    assert session.error == "nothing useful can come of this"
    assert [(r.action, r.source) for r in llm_record.decisions(sid)] == [("ABORT", "llm")]
    assert session.report is not None
    comps = session.report["compensations"]
    assert [(c["step"], c["tool"], c["status"]) for c in comps] == [
        ("w", "bench.undo_write", "completed")
    ], comps
    assert llm_effects.count(f"{sid}:w") == 1
    assert llm_effects.count(f"{sid}:w:compensate:undo") == 1
    assert report_steps(session)["after"]["status"] == "cancelled"
    assert llm.pending() == 0


BROKEN_BRANCH = f"""
goal: a non-critical step fails, and a critical one depends on it
steps:
  - {{id: a, tool: bench.sleep, params: {FAIL}, max_retries: 0}}
  - {{id: b, tool: bench.echo, params: {{value: 1}}, dependencies: [a], critical: true}}
  - {{id: c, tool: bench.sleep, params: {{seconds: 1.0}}}}
"""


def test_dependency_broken_reaches_the_decider_before_the_branch_is_skipped(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.script("decider", decision("CONTINUE", "b can wait; finish c"))

    sid, session = run(llm_producer, llm_record, BROKEN_BRANCH)

    assert session.status == SessionStatus.COMPLETED, session.error
    (decider_prompt,) = prompts(llm, "decider")
    assert "DEPENDENCY_BROKEN" in decider_prompt
    assert "critical step(s) b cannot run" in decider_prompt
    broken = [e for _, e in llm_hot.events(sid) if e.type == EventType.DEPENDENCY_BROKEN]
    # CRITICAL (to the decider) first, then the skip the CONTINUE decision led to
    assert [e.severity for e in broken] == [Severity.CRITICAL, Severity.INFO], broken
    assert broken[1].payload["skipped"] == ["b"]
    steps = report_steps(session)
    assert (steps["b"]["status"], steps["c"]["status"]) == ("skipped", "completed")


def test_a_session_near_its_deadline_decides_by_rules_without_asking_the_llm(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    # 30 s of deadline is less than one LLM call may take (llm_timeout_s, 60 s here)
    sid, session = run(llm_producer, llm_record, THREE_STEPS, SessionOptions(deadline_s=30))

    assert session.status == SessionStatus.FAILED, session.error
    assert llm.requests_for("decider") == []
    assert llm.requests_for("replanner") == []
    (row,) = llm_record.decisions(sid)
    assert (row.action, row.source) == ("ABORT", "rule")
    assert "left before the session deadline" in row.reasoning
    notices = [e for _, e in llm_hot.events(sid) if e.payload.get("notice") == "deadline_near"]
    assert len(notices) == 1
    assert "the rule policy decides" in notices[0].description
    kinds = [fields.get("kind") for _, fields in llm_hot.progress(sid)]
    assert "deadline_near" in kinds


PHASES = """
goal: gather, then decide
steps:
  - {id: g1, tool: bench.echo, params: {value: 1}, phase: gather}
  - {id: g2, tool: bench.echo, params: {value: 2}, phase: gather}
  - {id: d, tool: bench.echo, params: {value: "{{g1.output.value}}"}, dependencies: [g1, g2],
     phase: decide}
"""


def test_each_finished_phase_is_reviewed_by_the_decider(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.script("decider", decision("CONTINUE", "gathered"), decision("CONTINUE", "decided"))

    sid, session = run(llm_producer, llm_record, PHASES, SessionOptions(milestone_reviews=True))

    assert session.status == SessionStatus.COMPLETED, session.error
    reached = [e for _, e in llm_hot.events(sid) if e.type == EventType.MILESTONE_REACHED]
    assert [e.payload["phase"] for e in reached] == ["gather", "decide"]
    reviews = prompts(llm, "decider")
    assert len(reviews) == 2
    assert "milestone reached: proactive review" in reviews[0]
    assert "phase 'gather' finished (2 steps)" in reviews[0]
    assert [(r.action, r.reasoning) for r in llm_record.decisions(sid)] == [
        ("CONTINUE", "gathered"),
        ("CONTINUE", "decided"),
    ]
    assert llm.pending() == 0


def test_a_plan_with_phases_ends_without_reviews(run_plan: RunPlan, hot_state: HotState) -> None:
    # No LLM: each finished phase is announced, and nothing waits for a review.
    sid, session = run_plan(PHASES, timeout_s=30)

    assert session.status == SessionStatus.COMPLETED, session.error
    reached = [e for _, e in hot_state.events(sid) if e.type == EventType.MILESTONE_REACHED]
    assert [e.payload["phase"] for e in reached] == ["gather", "decide"]
