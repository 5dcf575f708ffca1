"""Streamed first plans end to end: real Redis, workers and supervisor, a scripted LLM.

The scripted server streams the planner's reply one token per ``chunk_s``; the session
installs and dispatches each whole step while the rest still arrives (early dispatch).
"""

from __future__ import annotations

import signal

import pytest

from planloop.core.hot_state import HotState
from planloop.core.models import SessionOptions, SessionStatus, StepStatus
from planloop.core.record import SqlRecord
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack
from tests.integration.llm_conftest import wait_recorded
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration

GOAL = "echo three values"
PLAN_MODE = SessionOptions(mode="plan")
REPLY = (
    '{"steps":[\n'
    '["a","bench.echo",{"value":"first"}],\n'
    '["b","bench.echo",{"value":"{{a.output.value}}"}],\n'
    '["c","bench.echo",{"value":"a third value, written at the end of a long reply"}]\n'
    "]}"
)


def versions(record: SqlRecord, sid: str) -> list[Plan]:
    return [Plan.model_validate_json(v.plan) for v in record.plan_versions(sid)]


def whole_plan(reply: str) -> Plan:
    """The plan the whole-reply path makes of ``reply`` for GOAL."""
    return CompactPlan.model_validate_json(reply).to_plan(GOAL, [])


def notes(hot: HotState, sid: str, kind: str) -> list[dict[str, str]]:
    return [fields for _, fields in hot.progress(sid) if fields.get("kind") == kind]


def test_a_step_completes_before_the_reply_has_ended(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.streams, llm.chunk_s = True, 0.05  # ~60 tokens: about 3 s of reply
    llm.script("planner", REPLY)

    sid = llm_producer.submit_goal(GOAL, tools=["bench"], options=PLAN_MODE)
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    plans = versions(llm_record, sid)
    assert next(p.step_ids for p in plans) == ["a"]  # installed alone, first
    assert plans[-1] == whole_plan(REPLY)  # the final version: what the whole reply makes
    assert session.plan_version == len(plans)
    assert session.planning == ""
    created = {v.version: v.created_at for v in llm_record.plan_versions(sid)}
    with_c = min(n for n, p in enumerate(plans, start=1) if "c" in p.step_ids)
    a = llm_hot.steps(sid, ["a"])["a"]
    # c is the reply's last line: a ran, and ended, while the model still wrote
    assert a.finished_at < created[with_c]
    assert a.attempt == 1
    streamed = notes(llm_hot, sid, "plan_streaming")
    assert streamed
    assert "a" in streamed[0]["steps"]
    events = [e for e in llm_record.events(sid) if "planning streams" in e.description]
    assert events, "the events say which steps were installed while planning streamed"
    planner = llm.requests_for("planner")
    assert len(planner) == 1
    assert planner[0].body["stream"] is True
    assert [c.role for c in llm_record.llm_calls(sid)].count("planner") == 1


def test_a_reply_that_ends_invalid_is_repaired_keeping_the_dispatched_steps(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.streams, llm.chunk_s = True, 0.03
    broken = REPLY.replace('"a third value', '"{{nowhere.output.value}} a third value')
    repaired = (
        '{"steps":[["a","bench.echo",{"value":"first"}],["c","bench.echo",{"value":"fixed"}]]}'
    )
    llm.script("planner", broken, repaired)

    sid = llm_producer.submit_goal(GOAL, tools=["bench"], options=PLAN_MODE)
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    final = versions(llm_record, sid)[-1]
    assert final.step_ids == ["a", "b", "c"]  # b was dispatched early: kept, not re-planned
    states = llm_hot.steps(sid, final.step_ids)
    assert all(st.status == StepStatus.COMPLETED and st.attempt == 1 for st in states.values())
    repair = llm.requests_for("planner")[1]
    assert "nowhere" in repair.prompt_text
    assert "already running" in repair.prompt_text
    assert [c.role for c in llm_record.llm_calls(sid)].count("planner") == 2


def test_an_endpoint_that_does_not_stream_gets_one_whole_plan_version(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.script("planner", REPLY)  # the server answers stream=true with a whole completion

    sid = llm_producer.submit_goal(GOAL, tools=["bench"], options=PLAN_MODE)
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert versions(llm_record, sid) == [whole_plan(REPLY)]
    assert session.plan_version == 1
    assert notes(llm_hot, sid, "plan_streaming") == []


def test_a_supervisor_killed_mid_stream_leaves_the_rest_to_its_successor(
    private_stack: MakeStack,
) -> None:
    with ScriptedLLMServer(streams=True, chunk_s=0.15) as srv:
        ps = private_stack(
            supervisors=1,
            llm_base_url=srv.base_url,
            llm_api_key="test",
            llm_max_retries=0,
        )
        srv.script("planner", REPLY, REPLY)  # the second: the successor's (not streamed)
        sid = ps.producer.submit_goal(GOAL, tools=["bench"], options=PLAN_MODE)

        def streaming() -> bool:
            info = ps.hot.session(sid)
            return info.planning == "streaming" and info.plan_version >= 1

        wait_for(streaming, 30, "the first steps installed while the plan streams")
        first = ps.hot.session(sid)
        killed = ps.owner_process(sid)
        assert killed is not None
        ps.signal(killed, signal.SIGKILL)
        assert srv.pending("planner") == 1  # the stream was cut: the plan never ended
        ps.start_supervisor()
        session = wait_recorded(ps.producer, ps.record, sid, timeout_s=60)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.planning == ""
    assert session.epoch > first.epoch
    final = versions(ps.record, sid)[-1] if ps.record.plan_versions(sid) else None
    assert final is not None
    assert final.step_ids == ["a", "b", "c"]
    states = ps.hot.steps(sid, final.step_ids)
    assert all(st.status == StepStatus.COMPLETED for st in states.values())
    assert states["a"].attempt == 1  # installed before the kill: run once, not planned again
    assert notes(ps.hot, sid, "plan_resumed")
    resumed = srv.requests_for("planner")[1]
    assert "already running" in resumed.prompt_text
    assert not resumed.body.get("stream")


def test_planning_that_keeps_failing_after_early_steps_falls_back_keeping_them(
    llm: ScriptedLLMServer, llm_producer: Producer, llm_record: SqlRecord, llm_hot: HotState
) -> None:
    llm.streams, llm.chunk_s = True, 0.02
    broken = REPLY.replace('"a third value', '"{{nowhere.output.value}} a third value')
    llm.script("planner", broken, broken, broken)  # streamed, then its two repairs
    llm.script("react", {"thought": "a and b say enough", "final_answer": {"text": "done"}})

    sid = llm_producer.submit_goal(GOAL, tools=["bench"], options=PLAN_MODE)
    session = wait_recorded(llm_producer, llm_record, sid)

    assert session.status == SessionStatus.COMPLETED, session.error
    final = versions(llm_record, sid)[-1]
    assert final.step_ids[:2] == ["a", "b"]
    assert final.steps[-1].tool == "agent.react"
    states = llm_hot.steps(sid, ["a", "b"])
    assert all(st.status == StepStatus.COMPLETED and st.attempt == 1 for st in states.values())
    assert notes(llm_hot, sid, "react_fallback")
    assert llm.pending("planner") == 0
