"""The planning loop end to end: real Redis, workers and supervisor, a scripted LLM over HTTP.

Six verification scenarios, then a mid-run signal, a WARNING batch, garbage model
output and a repeated failed plan. The model's answers are scripted per role; what it was
told is read back from the server's recorded requests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import HotState
from planloop.core.models import EventType, SessionOptions, SessionRecord, SessionStatus, StepStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan, parse_plan
from planloop.producer.client import Producer
from planloop.producer.history import session_history
from tests.conftest import wait_for
from tests.integration.conftest import report_steps
from tests.integration.llm_conftest import wait_recorded
from tests.llm_server import ScriptedLLMServer, count_prompt_tokens

pytestmark = pytest.mark.integration

# Every LLM session that completes ends with the critic's verdict and the summarizer's answer
# (the scripted server's defaults: passed, "done").
END_ROLES = ["critic", "summarizer"]
# Recorded calls these tests are not about (the usage tests check them): the lessons search's
# embeddings, and the reflection that may follow the end while the test reads.
SIDE_ROLES = frozenset({"embedding", "reflector"})

FAIL = "{seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}"

THREE_STEPS = f"""
goal: three steps, the second one fails for good
steps:
  - {{id: s1, tool: bench.echo, params: {{value: first-result}}}}
  - {{id: s2, tool: bench.sleep, params: {FAIL}, dependencies: [s1], max_retries: 0,
      critical: true}}
  - {{id: s3, tool: bench.echo, params: {{value: "{{{{s2.output.slept}}}}"}}, dependencies: [s2]}}
"""


def decision(action: str, reasoning: str, cancel: list[str] | None = None) -> dict[str, Any]:
    """A decider answer."""
    return {
        "action": action,
        "reasoning": reasoning,
        "steps_to_cancel": cancel or [],
        "new_context_hints": [],
        "confidence": 0.8,
    }


def subgraph(*steps: dict[str, Any]) -> dict[str, Any]:
    """An incremental re-planner answer."""
    return {"steps": list(steps), "reasoning": "replace what cannot work"}


def echo(step_id: str, value: Any, *deps: str) -> dict[str, Any]:
    return {"id": step_id, "tool": "bench.echo", "params": {"value": value}, "dependencies": deps}


def failing(step_id: str, *deps: str, critical: bool = True) -> dict[str, Any]:
    """A step that fails for good on its first attempt."""
    return {
        "id": step_id,
        "tool": "bench.sleep",
        "params": {"seconds": 0.01, "simulate": {"fail_attempts": [1], "permanent": True}},
        "dependencies": deps,
        "max_retries": 0,
        "critical": critical,
    }


def run(
    producer: Producer,
    record: SqlRecord,
    plan: str,
    options: SessionOptions | None = None,
) -> tuple[str, SessionRecord]:
    sid = producer.submit(parse_plan(plan), options)
    return sid, wait_recorded(producer, record, sid)


def prompts(srv: ScriptedLLMServer, role: str) -> list[str]:
    return [r.prompt_text for r in srv.requests_for(role)]


def notes(hot: HotState, sid: str, kind: str) -> list[dict[str, str]]:
    return [fields for _, fields in hot.progress(sid) if fields.get("kind") == kind]


def plan_version(record: SqlRecord, sid: str, version: int) -> Plan:
    row = next(v for v in record.plan_versions(sid) if v.version == version)
    return Plan.model_validate_json(row.plan)


# --- the verification scenarios -----------------------------------------------------------


def test_a_failed_step_is_replaced_by_the_replanners_subgraph(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.script("decider", decision("REPLAN_REMAINING", "s2 cannot work; replace s3", ["s3"]))
    llm.script("replanner", subgraph(echo("s3b", "{{s1.output.value}}", "s1")))

    sid, session = run(llm_producer, llm_record, THREE_STEPS)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.plan_version == 2
    assert session.replans == 1
    steps = report_steps(session)
    assert steps["s1"]["status"] == "completed"
    assert steps["s3b"]["status"] == "completed"
    assert steps["s3b"]["output"] == {"value": "first-result"}
    assert "s3" not in steps
    s3 = llm_hot.steps(sid, ["s3"])["s3"]
    assert (s3.status, s3.attempt) == (StepStatus.CANCELLED, 0)  # never ran
    assert [s.id for s in plan_version(llm_record, sid, 2).steps] == ["s1", "s3b"]
    # the decision, its reasoning and its tokens are in SQL
    (row,) = llm_record.decisions(sid)
    assert (row.action, row.source) == ("REPLAN_REMAINING", "llm")
    assert row.reasoning == "s2 cannot work; replace s3"
    (decider_request,) = llm.requests_for("decider")
    assert row.prompt_tokens == count_prompt_tokens(decider_request.messages)
    assert row.completion_tokens > 0
    assert "s2" in decider_request.prompt_text
    assert "injected failure" in decider_request.prompt_text
    roles = [c.role for c in llm_record.llm_calls(sid) if c.role not in SIDE_ROLES]
    assert roles == ["decider", "replanner", *END_ROLES]
    assert llm.pending() == 0
    # `planloop show` tells the same story: both versions, the diff, the decision, tokens
    history = session_history(llm_record, sid)
    assert [v["version"] for v in history["plan_versions"]] == [1, 2]
    assert history["plan_versions"][1]["diff"] == [
        "+ s3b (bench.echo)",
        "- s2 (bench.sleep)",
        "- s3 (bench.echo)",
    ]
    assert history["decisions"][0]["action"] == "REPLAN_REMAINING"
    shown = [c for c in history["llm_calls"] if c["role"] not in SIDE_ROLES]
    assert len(shown) == 4  # decider, replanner, critic, summarizer
    assert history["llm"]["calls"] == len(history["llm_calls"])
    assert history["llm"]["prompt_tokens"] > 0


def test_all_steps_succeed_without_asking_the_decider(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    plan = """
goal: nothing goes wrong
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: "{{a.output.value}}"}, dependencies: [a]}
  - {id: c, tool: bench.sleep, params: {seconds: 0.01}, dependencies: [a]}
"""
    sid, session = run(llm_producer, llm_record, plan)

    assert session.status == SessionStatus.COMPLETED
    assert session.error == ""
    assert {s["status"] for s in report_steps(session).values()} == {"completed"}
    # No decider: only the round's end. (A reflector call may be an earlier test's session
    # reflecting after its end, which runs in the background.)
    roles = [r.role for r in llm.requests if r.role != "reflector"]
    assert roles == END_ROLES
    assert list(llm_record.decisions(sid)) == []
    assert session.plan_version == 1


def test_the_trigger_after_the_last_replan_is_a_forced_abort(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script(
        "decider",
        decision("REPLAN_REMAINING", "try r1", ["s3"]),
        decision("REPLAN_REMAINING", "try r2"),
        decision("REPLAN_REMAINING", "try r3"),
    )
    llm.script(
        "replanner",
        subgraph(failing("r1", "s1")),
        subgraph(failing("r2", "s1")),
        subgraph(failing("r3", "s1")),
    )

    sid, session = run(llm_producer, llm_record, THREE_STEPS, SessionOptions(max_replans=3))

    assert session.status == SessionStatus.ABORTED
    assert session.replans == 3
    assert session.plan_version == 4
    assert len(llm.requests_for("decider")) == 3
    assert len(llm.requests_for("replanner")) == 3
    rows = llm_record.decisions(sid)
    assert [(r.action, r.source) for r in rows] == [
        ("REPLAN_REMAINING", "llm"),
        ("REPLAN_REMAINING", "llm"),
        ("REPLAN_REMAINING", "llm"),
        ("ABORT", "budget"),
    ]
    assert "re-plan budget spent (3/3)" in rows[-1].reasoning
    assert rows[-1].prompt_tokens == 0
    assert "re-plan budget spent" in session.error
    assert report_steps(session)["r3"]["status"] == "failed"


def test_the_progress_stream_carries_each_replan_with_reason_and_count(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    # Not critical: each failure is a WARNING, decided on because nothing else can run.
    plan = f"""
goal: a branch that keeps failing
steps:
  - {{id: s1, tool: bench.echo, params: {{value: 1}}}}
  - {{id: s2, tool: bench.sleep, params: {FAIL}, dependencies: [s1], max_retries: 0}}
  - {{id: s3, tool: bench.echo, params: {{value: 3}}, dependencies: [s2]}}
"""
    llm.script("decider", *(decision("REPLAN_REMAINING", f"attempt {i}") for i in (1, 2, 3)))
    llm.script("replanner", *(subgraph(failing(f"w{i}", "s1", critical=False)) for i in (1, 2, 3)))

    sid, session = run(llm_producer, llm_record, plan, SessionOptions(max_replans=3))

    # The fourth failure is not critical: past the budget the rules skip its branch
    assert session.status == SessionStatus.COMPLETED, session.error
    assert len(llm.requests_for("decider")) == 3
    replans = notes(llm_hot, sid, "replan_required")
    assert [n["count"] for n in replans] == ["1", "2", "3"]
    assert {n["action"] for n in replans} == {"REPLAN_REMAINING"}
    for note in replans:
        assert note["reason"] == "1 WARNING event(s) and nothing else can run"
    decided = notes(llm_hot, sid, "decision")
    assert [(n["action"], n["source"]) for n in decided][-1] == ("CONTINUE", "rule")
    assert decided[-1]["reasoning"].startswith("re-plan budget spent (3/3)")
    assert notes(llm_hot, sid, "ended")[-1]["status"] == "completed"


def test_sessions_replanning_at_the_same_time_stay_isolated(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    # The same plan shape with different data: every scripted answer fits either session,
    # so it does not matter which session's request takes which answer.
    plan = """
goal: twin {tag}
steps:
  - {{id: s1, tool: bench.echo, params: {{value: {tag}}}}}
  - {{id: s2, tool: bench.sleep, params: {{seconds: 0.2, simulate: {{fail_attempts: [1],
      permanent: true}}}}, dependencies: [s1], max_retries: 0, critical: true}}
  - {{id: s3, tool: bench.echo, params: {{value: 3}}, dependencies: [s2]}}
"""
    llm.script("decider", *[decision("REPLAN_REMAINING", "replace s3", ["s3"])] * 2)
    llm.script("replanner", *[subgraph(echo("s3b", "{{s1.output.value}}", "s1"))] * 2)

    sids = {tag: llm_producer.submit(parse_plan(plan.format(tag=tag))) for tag in ("left", "right")}
    sessions = {tag: wait_recorded(llm_producer, llm_record, sid) for tag, sid in sids.items()}

    for tag, session in sessions.items():
        assert session.status == SessionStatus.COMPLETED, session.error
        assert session.plan_version == 2
        steps = report_steps(session)
        assert steps["s3b"]["output"] == {"value": tag}
        assert [d.action for d in llm_record.decisions(sids[tag])] == ["REPLAN_REMAINING"]
        roles = [c.role for c in llm_record.llm_calls(sids[tag]) if c.role not in SIDE_ROLES]
        assert roles == ["decider", "replanner", *END_ROLES]
    for role in ("decider", "replanner"):
        told = prompts(llm, role)
        assert len(told) == 2
        # each request speaks of one session only
        assert sorted("twin left" in t for t in told) == [False, True]
        assert all(("twin left" in t) != ("twin right" in t) for t in told)


def test_completed_steps_never_run_again_and_their_results_reach_the_replanner(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_effects: SqlEffectLedger,
) -> None:
    plan = f"""
goal: writes before a failure
steps:
  - {{id: w1, tool: bench.write, params: {{label: alpha}}}}
  - {{id: e1, tool: bench.echo, params: {{value: {{marker: kiwi-42}}}}}}
  - {{id: w2, tool: bench.write, params: {{label: beta}}, dependencies: [w1]}}
  - {{id: f, tool: bench.sleep, params: {FAIL}, dependencies: [w2, e1], max_retries: 0,
      critical: true}}
  - {{id: z, tool: bench.echo, params: {{value: "{{{{f.output.slept}}}}"}}, dependencies: [f]}}
"""
    llm.script("decider", decision("REPLAN_REMAINING", "f cannot work", ["z"]))
    llm.script(
        "replanner",
        subgraph(
            echo("fix", "{{e1.output.value.marker}}", "e1"),
            {
                "id": "w3",
                "tool": "bench.write",
                "params": {"label": "after {{fix.output.value}}"},
                "dependencies": ["fix", "w2"],
            },
        ),
    )

    sid, session = run(llm_producer, llm_record, plan)

    assert session.status == SessionStatus.COMPLETED, session.error
    steps = report_steps(session)
    for step_id in ("w1", "w2", "e1", "fix", "w3"):
        assert steps[step_id]["status"] == "completed"
        assert steps[step_id]["attempts"] == 1
    for step_id in ("w1", "w2", "w3"):
        assert llm_effects.count(f"{sid}:{step_id}") == 1
    assert steps["w3"]["output"]["label"] == "after kiwi-42"
    attempts = [(a.step_id, a.attempt) for a in llm_record.attempts(sid) if a.step_id != "f"]
    assert sorted(attempts) == sorted((i, 1) for i in ("w1", "w2", "e1", "fix", "w3"))
    (told,) = prompts(llm, "replanner")
    assert "kiwi-42" in told
    assert steps["w1"]["output"]["receipt_id"] in told
    assert steps["w2"]["output"]["receipt_id"] in told


# --- signals, batches, garbage, repeats ---------------------------------------------------


def test_a_signal_mid_run_leads_to_a_decision(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    plan = """
goal: a slow step and a user with a budget
steps:
  - {id: s1, tool: bench.echo, params: {value: 1}}
  - {id: slow, tool: bench.sleep, params: {seconds: 4}, dependencies: [s1]}
  - {id: after, tool: bench.echo, params: {value: 2}, dependencies: [slow]}
"""
    llm.script("decider", decision("REPLAN_REMAINING", "the budget rules out slow", ["slow"]))
    llm.script("replanner", subgraph(echo("cheap", "within budget", "s1")))
    sid = llm_producer.submit(parse_plan(plan))

    def slow_started() -> bool:
        slow = llm_hot.steps(sid, ["slow"]).get("slow")
        return slow is not None and slow.started_at > 0

    wait_for(slow_started, 10, "the slow step to start")

    llm_producer.signal(sid, "budget is 5k")
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    (decider,) = prompts(llm, "decider")
    assert "budget is 5k" in decider
    assert "NEW_CONSTRAINT" in decider
    (replanner,) = prompts(llm, "replanner")
    assert "budget is 5k" in replanner
    (row,) = llm_record.decisions(sid)
    assert row.action == "REPLAN_REMAINING"
    steps = report_steps(session)
    assert steps["cheap"]["output"] == {"value": "within budget"}
    assert llm_hot.steps(sid, ["slow"])["slow"].status == StepStatus.CANCELLED


def test_warnings_trigger_a_decision_only_when_the_batch_is_full(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    miss = "expect: [{path: value, op: gt, value: 5}]"
    plan = f"""
goal: three results below expectations, one after another
steps:
  - {{id: keep, tool: bench.sleep, params: {{seconds: 1.0}}}}
  - {{id: u1, tool: bench.echo, params: {{value: 1}}, {miss}}}
  - {{id: u2, tool: bench.echo, params: {{value: 2}}, dependencies: [u1], {miss}}}
  - {{id: u3, tool: bench.echo, params: {{value: 3}}, dependencies: [u2], {miss}}}
"""
    # One answer only: a decision before the third warning would find no script, fail over
    # to the rule policy and show up as a second decision.
    llm.script("decider", decision("CONTINUE", "low values are fine"))

    sid, session = run(llm_producer, llm_record, plan, SessionOptions(batch_react_size=3))

    assert session.status == SessionStatus.COMPLETED, session.error
    unexpected = [e for _, e in llm_hot.events(sid) if e.type == EventType.TASK_UNEXPECTED_RESULT]
    assert sorted(e.step_id for e in unexpected) == ["u1", "u2", "u3"]
    assert [(d.action, d.source) for d in llm_record.decisions(sid)] == [("CONTINUE", "llm")]
    (told,) = prompts(llm, "decider")
    assert "Trigger: 3 WARNING events gathered (batch of 3)" in told
    for step_id in ("u1", "u2", "u3"):
        assert f"TASK_UNEXPECTED_RESULT step {step_id}" in told


def test_a_sessions_own_batch_size_is_honoured(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    miss = "expect: [{path: value, op: gt, value: 5}]"
    plan = f"""
goal: two results below expectations with a batch of two
steps:
  - {{id: keep, tool: bench.sleep, params: {{seconds: 1.0}}}}
  - {{id: u1, tool: bench.echo, params: {{value: 1}}, {miss}}}
  - {{id: u2, tool: bench.echo, params: {{value: 2}}, dependencies: [u1], {miss}}}
"""
    llm.script("decider", decision("CONTINUE", "low values are fine"))

    _sid, session = run(llm_producer, llm_record, plan, SessionOptions(batch_react_size=2))

    assert session.status == SessionStatus.COMPLETED, session.error
    (told,) = prompts(llm, "decider")
    # the session's option (2), not the settings' default (3), sets the batch
    assert "Trigger: 2 WARNING events gathered (batch of 2)" in told


GOOD_PLAN = {
    "goal": "echo twice",
    "steps": [echo("one", "hello"), echo("two", "{{one.output.value}}", "one")],
}


def test_garbage_planner_output_is_repaired(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    cycle = {"steps": [echo("a", 1, "b"), echo("b", 2, "a")]}
    wrong_enum = {
        "steps": [
            {
                "id": "a",
                "tool": "bench.echo",
                "params": {"value": 1},
                "expect": [{"path": "value", "op": "bigger", "value": 0}],
            }
        ]
    }
    unknown_tool = {"steps": [{"id": "a", "tool": "bench.ech", "params": {"value": 1}}]}
    llm.script(
        "planner",
        "Sure! I would first echo hello, then echo it again.",  # prose, no JSON
        '{"goal": "echo twice", "steps": [{"id": "one",',  # broken JSON
        cycle,
        wrong_enum,
        unknown_tool,
        GOOD_PLAN,
    )

    sid = llm_producer.submit_goal("echo hello twice", tools=["bench"])
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert report_steps(session)["two"]["output"] == {"value": "hello"}
    told = prompts(llm, "planner")
    assert len(told) == 6
    # each request carries the exact problem with the answer before it
    assert "holds no JSON object" in told[1]
    assert "does not parse" in told[2]
    assert "cycle: a -> b -> a" in told[3] or "cycle: b -> a -> b" in told[3]
    assert "steps.0.expect.0.op: Input should be 'exists'" in told[4]
    assert "unknown tool 'bench.ech'" in told[5]
    calls = [c for c in llm_record.llm_calls(sid) if c.role not in {*END_ROLES, *SIDE_ROLES}]
    assert {c.role for c in calls} == {"planner"}
    assert sum(c.prompt_tokens for c in calls) == sum(
        count_prompt_tokens(r.messages) for r in llm.requests_for("planner")
    )


def test_planner_output_that_stays_invalid_gives_way_to_an_agent_step(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    """A planning failure no longer fails the session (tests/integration/
    test_react_steps.py covers the agent step that stands in)."""
    cycle = {"steps": [echo("a", 1, "b"), echo("b", 2, "a")]}
    llm.script("planner", cycle, cycle, cycle)
    llm.script("react", {"final_answer": {"echoed": "hello twice"}})

    sid = llm_producer.submit_goal(
        "echo hello twice", tools=["bench"], options=SessionOptions(mode="plan")
    )
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert len(llm.requests_for("planner")) == 3
    (said,) = notes(llm_hot, sid, "react_fallback")
    assert "planning failed" in said["reason"]
    assert "cycle" in said["reason"]


def test_a_decider_answering_garbage_leaves_the_decision_to_the_rule_policy(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    llm.script("decider", *[json.dumps({"action": "MAYBE", "reasoning": "?"})] * 3)

    sid, session = run(llm_producer, llm_record, THREE_STEPS)

    # s2 is critical and has no fallback: the rule policy fails the session
    assert session.status == SessionStatus.FAILED
    (row,) = llm_record.decisions(sid)
    assert (row.action, row.source) == ("ABORT", "rule")
    assert row.reasoning.startswith("decision agent unavailable")
    assert "critical step s2 failed" in row.reasoning
    assert len(llm.requests_for("decider")) == 3


def test_a_repeated_failed_subgraph_is_refused_then_counts_as_a_failed_replan(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord
) -> None:
    same = subgraph(failing("r1", "s1"))
    llm.script(
        "decider",
        decision("REPLAN_REMAINING", "try r1", ["s3"]),
        decision("REPLAN_REMAINING", "try again"),
        decision("REPLAN_REMAINING", "third time"),
    )
    llm.script("replanner", same, same, same, subgraph(echo("r2", "{{s1.output.value}}", "s1")))

    sid, session = run(llm_producer, llm_record, THREE_STEPS, SessionOptions(max_replans=5))

    assert session.status == SessionStatus.COMPLETED, session.error
    told = prompts(llm, "replanner")
    assert len(told) == 4
    assert "repeats a plan that already failed" not in told[1]
    assert "repeats a plan that already failed" in told[2]
    # two installed re-plans and one failed one
    assert session.replans == 3
    assert session.plan_version == 3
    assert [s.id for s in plan_version(llm_record, sid, 3).steps] == ["s1", "r2"]
    assert len(llm_record.decisions(sid)) == 3
    assert report_steps(session)["r2"]["output"] == {"value": "first-result"}
