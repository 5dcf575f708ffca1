"""Effects under timeouts, end to end (the shipped wheel, real Redis, Celery workers and
SQLite): a write that outlives its attempt's timeout is refused, or, already applying,
committed once and compensated; an agent step that calls a timed-out write again applies
it once. Applications are counted in the audit file, outside Redis and SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planloop.core.effects import EffectAudit
from planloop.core.heartbeat import read_heartbeats
from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.history import late_effect_line, session_history
from planloop.workers.toolsets import BENCH_TOOLS
from tests.conftest import own_pg_database, wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps
from tests.integration.test_fork_continue import cli
from tests.llm_server import ScriptedLLMServer

pytestmark = [pytest.mark.integration]

LATE_MODULE = "late_tools"  # tests/tool_modules/late_tools.py
HOLD_UNDO = "LATE_TOOLS_HOLD_UNDO"  # its late.undo holds its claim until killed


def late_stack(private_stack: MakeStack, database_url: str = "", **env: str) -> PrivateStack:
    """A supervisor, and a worker serving the bench tools and ``late.*``."""
    record = {"database_url": database_url} if database_url else {}
    built = private_stack(workers=0, supervisors=1, **record)
    built.start_worker(4, tool_modules=[BENCH_TOOLS, LATE_MODULE], env=env)
    wait_for(
        lambda: any("late.write" in hb.tools for hb in read_heartbeats(built.redis, built.keys)),
        60,
        "the late worker's heartbeat",
    )
    return built


def audit_of(built: PrivateStack) -> EffectAudit:
    assert built.settings.effect_audit_path is not None
    return EffectAudit(built.settings.effect_audit_path)


def test_a_write_that_outlives_its_timeout_is_refused_and_its_retry_applies_it_once(
    private_stack: MakeStack,
) -> None:
    built = late_stack(private_stack)
    plan = parse_plan(
        """
goal: a write whose first attempt sleeps past its timeout, then asks the ledger
steps:
  - {id: w, tool: late.write, params: {label: slow, first_sleep_s: 3}, timeout_s: 1,
     max_retries: 2}
"""
    )
    sid = built.producer.submit(plan)
    record = built.finish(sid, ["w"], timeout_s=60)
    assert record.status == SessionStatus.COMPLETED, record.error
    assert report_steps(record)["w"]["attempts"] == 2
    audit, key = audit_of(built), f"{sid}:w"
    # the first attempt's thread wakes after the retry completed: its write is refused
    wait_for(lambda: audit.refusals()[key] == 1, 15, "the late write's refusal")
    assert audit.counts()[key] == 1  # applied once, by the retry
    assert built.effects.receipt(key) == {"receipt_id": f"W-{key}", "label": "slow"}


def test_a_write_already_applying_at_its_timeout_commits_once_and_is_compensated(
    private_stack: MakeStack,
) -> None:
    built = late_stack(private_stack)
    plan = parse_plan(
        """
goal: a write whose first attempt is inside its effect when the timeout passes
steps:
  - {id: w, tool: late.write, params: {label: applying, first_apply_s: 1.3}, timeout_s: 1,
     max_retries: 0, critical: true}
"""
    )
    sid = built.producer.submit(plan, SessionOptions(compensate_on_failure=True))
    record = built.finish(sid, ["w"], timeout_s=60)
    assert record.status == SessionStatus.FAILED, record.error
    assert report_steps(record)["w"]["status"] == "interrupted"
    audit, key = audit_of(built), f"{sid}:w"
    assert audit.counts()[key] == 1  # it landed after the timeout, once
    assert record.report is not None
    undone = [c for c in record.report["compensations"] if c["step"] == "w"]
    assert [(c["tool"], c["status"]) for c in undone] == [("late.undo", "completed")]
    assert audit.counts()[f"{key}:compensate"] == 1
    # recorded as a late effect, settled by the ending that undid it
    wait_for(lambda: _settled(built, sid), 15, "the late effect settled")
    assert _late(built, sid) == [("w", "compensated", "ending", "")]


def _late(built: PrivateStack, sid: str) -> list[tuple[str, str, str, str]]:
    rows = built.record.late_effects(sid)
    return [(r.step_id, r.status, r.settled_by, r.compensation_tool) for r in rows]


def _settled(built: PrivateStack, sid: str) -> bool:
    rows = built.record.late_effects(sid)
    return bool(rows) and all(r.status != "pending" for r in rows)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL database of this test's own."""
    with own_pg_database("planloop_late_") as url:
        yield url


@pytest.mark.postgres
def test_a_write_that_commits_after_its_session_ended_is_compensated_after_it(
    private_stack: MakeStack, pg_url: str
) -> None:
    """A tool that cannot be stopped holds its write past the timeout and past the bounded
    wait for it; the session fails and compensates what it knows of before the write
    commits. The late write is recorded against the step, shown by ``planloop show``, and
    compensated once after the session ended. On PostgreSQL: on SQLite the write holds the
    database's write lock, so the ending's own record waits for it and finds it."""
    built = late_stack(private_stack, pg_url)
    plan = parse_plan(
        """
goal: a write that commits after its session ended
steps:
  - {id: w, tool: late.write, params: {label: later, first_apply_s: 5}, timeout_s: 1,
     max_retries: 0, critical: true}
"""
    )
    sid = built.producer.submit(plan, SessionOptions(compensate_on_failure=True))
    record = built.finish(sid, ["w"], timeout_s=60)
    assert record.status == SessionStatus.FAILED, record.error
    assert report_steps(record)["w"]["status"] == "interrupted"
    assert record.report is not None
    assert [c for c in record.report["compensations"] if c["step"] == "w"] == []  # missed
    audit, key = audit_of(built), f"{sid}:w"
    wait_for(lambda: _settled(built, sid), 30, "the late effect settled")
    assert _late(built, sid) == [("w", "compensated", "late", "late.undo")]
    assert audit.counts()[key] == 1  # the write landed once, late
    assert audit.counts()[f"{key}:compensate"] == 1  # and was undone once, after the end
    assert built.effects.receipt(f"{key}:compensate") == {
        "undone": "later",
        "key": f"{key}:compensate",
    }
    shown = session_history(built.record, sid)["late_effects"]
    assert [(e["step"], e["status"], e["settled_by"]) for e in shown] == [
        ("w", "compensated", "late")
    ]
    assert "after the session ended" in late_effect_line(shown[0])


@pytest.mark.postgres
def test_a_late_write_whose_worker_is_killed_while_undoing_it_is_undone_once_by_another(
    private_stack: MakeStack, pg_url: str, tmp_path: Path
) -> None:
    """The write commits after its session failed and the ending missed it; the worker that
    recorded it is killed halfway through undoing it (its claim of the compensation's key
    uncommitted). A worker started afterwards finds the row left pending by its sweep, and
    undoes the write once: the killed claim rolled back with its connection."""
    built = private_stack(
        workers=0,
        supervisors=1,
        database_url=pg_url,
        late_effect_settle_s=1.0,  # a row left pending this long has no settler waiting
        late_effect_sweep_s=0.2,
    )
    held = tmp_path / "undo-held"
    doomed = built.start_worker(
        4, tool_modules=[BENCH_TOOLS, LATE_MODULE], env={HOLD_UNDO: str(held)}
    )
    wait_for(lambda: _late_tools_served(built), 60, "the first worker's heartbeat")
    plan = parse_plan(
        """
goal: a write that commits after its session ended, its worker killed while undoing it
steps:
  - {id: w, tool: late.write, params: {label: killed, first_apply_s: 5}, timeout_s: 1,
     max_retries: 0, critical: true}
"""
    )
    sid = built.producer.submit(plan, SessionOptions(compensate_on_failure=True))
    record = built.finish(sid, ["w"], timeout_s=60)
    assert record.status == SessionStatus.FAILED, record.error
    assert record.report is not None
    assert [c for c in record.report["compensations"] if c["step"] == "w"] == []  # missed
    audit, key = audit_of(built), f"{sid}:w"
    wait_for(held.exists, 30, "the first worker inside the late write's compensation")
    built.signal(doomed)  # SIGKILL: the compensation's claim dies with its connection
    assert _late(built, sid) == [("w", "pending", "", "")]
    assert audit.counts()[key] == 1
    assert audit.counts()[f"{key}:compensate"] == 0
    assert built.effects.receipt(f"{key}:compensate") is None

    built.start_worker(4, tool_modules=[BENCH_TOOLS, LATE_MODULE])
    # its sweep starts with its first step
    nudge = parse_plan(
        """
goal: a step for the new worker
steps:
  - {id: s, tool: bench.sleep}
"""
    )
    nudged = built.producer.submit(nudge)
    assert built.finish(nudged, ["s"], timeout_s=60).status == SessionStatus.COMPLETED
    wait_for(lambda: _settled(built, sid), 30, "the late effect settled by the new worker")
    assert _late(built, sid) == [("w", "compensated", "late", "late.undo")]
    assert audit.counts()[key] == 1
    assert audit.counts()[f"{key}:compensate"] == 1  # undone once, by the new worker
    assert built.effects.receipt(f"{key}:compensate") == {
        "undone": "killed",
        "key": f"{key}:compensate",
    }
    assert _shown_late(built, sid) == [
        "late write of w attempt 1 (late.write): compensated by late.undo after the session ended"
    ]


def test_a_late_write_whose_worker_is_killed_before_its_session_ends_is_kept_by_another(
    private_stack: MakeStack,
) -> None:
    """The worker that recorded a late write is killed while it waits for the session to end
    (a step of it still runs there); a worker started afterwards runs what was lost, and once
    the session completed its sweep settles the write: kept, as the session keeps its writes."""
    built = private_stack(
        workers=0,
        supervisors=1,
        late_effect_settle_s=4.0,  # the killed worker still waits for the session's end
        late_effect_sweep_s=0.2,
    )
    doomed = built.start_worker(4, tool_modules=[BENCH_TOOLS, LATE_MODULE])
    wait_for(lambda: _late_tools_served(built), 60, "the first worker's heartbeat")
    plan = parse_plan(
        """
goal: a late write kept by a session that outlives the worker that recorded it
steps:
  - {id: w, tool: late.write, params: {label: kept, first_apply_s: 1.3}, timeout_s: 1,
     max_retries: 1}
  - {id: hold, tool: bench.sleep, params: {seconds: 3}, timeout_s: 4, max_retries: 2}
"""
    )
    sid = built.producer.submit(plan)
    audit, key = audit_of(built), f"{sid}:w"
    wait_for(lambda: _late(built, sid) == [("w", "pending", "", "")], 30, "the late write")
    # its audit line follows the commit: killed between the two, the write goes uncounted
    wait_for(lambda: audit.counts()[key] == 1, 15, "the late write's audit line")
    built.signal(doomed)
    built.start_worker(4, tool_modules=[BENCH_TOOLS, LATE_MODULE])
    record = built.finish(sid, ["w", "hold"], timeout_s=60)
    assert record.status == SessionStatus.COMPLETED, record.error
    wait_for(lambda: _settled(built, sid), 30, "the late effect settled by the new worker")
    assert _late(built, sid) == [("w", "kept", "late", "")]
    assert audit.counts()[key] == 1  # the retry reused it
    assert audit.counts()[f"{key}:compensate"] == 0
    assert _shown_late(built, sid) == [
        "late write of w attempt 1 (late.write): kept (the session keeps its writes)"
    ]


def _late_tools_served(built: PrivateStack) -> bool:
    return any("late.write" in hb.tools for hb in read_heartbeats(built.redis, built.keys))


def _shown_late(built: PrivateStack, sid: str) -> list[str]:
    """The late effects ``planloop show`` (the shipped CLI) lists for the session."""
    shown = cli(built, "show", sid)
    assert shown.returncode == 0, shown.stderr
    return [line for line in shown.stdout.splitlines() if line.startswith("late write of")]


def worker_llm_env(server: ScriptedLLMServer) -> dict[str, str]:
    """The LLM settings of a worker that runs agent steps against the scripted server (the
    supervisor keeps the rule policy: it never asks the model)."""
    return {
        "PLANLOOP_LLM_BASE_URL": server.base_url,
        "PLANLOOP_LLM_API_KEY": "test",
        "PLANLOOP_LLM_MAX_RETRIES": "0",
    }


def turn(tool: str, **params: Any) -> dict[str, Any]:
    return {"thought": f"call {tool}", "tool": tool, "params": params}


def test_an_agent_step_that_calls_a_timed_out_write_again_applies_it_once(
    private_stack: MakeStack, llm_server: ScriptedLLMServer
) -> None:
    llm_server.wait_quiet(0.5)
    llm_server.reset()
    built = late_stack(private_stack, **worker_llm_env(llm_server))
    write = {"label": "agent", "first_sleep_s": 3}
    llm_server.script(
        "react",
        turn("late.write", **write),  # times out: nothing applied yet
        turn("late.write", **write),  # the same call again: the first call's key
        {"thought": "done", "final_answer": {"result": "written once"}},
    )
    plan = parse_plan(
        """
goal: an agent step whose write times out and is called again
steps:
  - id: agent
    tool: agent.react
    instruction: Record one write labelled agent, then answer
    params: {tools: [late.write], max_iterations: 4}
    timeout_s: 30
"""
    )
    sid = built.producer.submit(plan)
    record = built.finish(sid, ["agent"], timeout_s=60)
    try:
        assert record.status == SessionStatus.COMPLETED, record.error
        audit, key = audit_of(built), f"{sid}:agent:react:1"
        assert audit.counts()[key] == 1
        assert audit.counts()[f"{sid}:agent:react:2"] == 0  # no second key: no second write
        wait_for(lambda: audit.refusals()[key] == 1, 15, "the first call's late refusal")
        output = report_steps(record)["agent"]["output"]
        calls = [(c["iteration"], c["ok"]) for c in output["tool_calls"]]
        assert calls == [(1, False), (2, True)]  # one failed call, one that wrote
        told = [r.prompt_text for r in llm_server.requests_for("react")]
        assert "no write of it is left to land" in told[1]
    finally:
        llm_server.reset()
