"""Fork and continue from the CLI and the SDK on a real stack: only what changed runs, and a
supervisor SIGKILLed in the middle re-runs nothing that completed.

Effects are counted outside Redis: in the effect ledger's audit file (one line per write
applied, core/effects.py), where a write that ran twice would show twice.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import planloop
from planloop.aio import AsyncClient
from planloop.core.effects import EffectAudit
from planloop.core.errors import ContinueRefusedError, PlanVersionNotFoundError
from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps
from tests.shipped import shipped

pytestmark = pytest.mark.integration


def write_chain(n: int, seconds: float = 0.1, width: int = 2, edit: str = "") -> Plan:
    """``n`` bench.write steps in ``width`` interleaved chains; step ``edit`` gets a new label."""
    steps: list[dict[str, Any]] = []
    for i in range(n):
        sid = f"w{i:02d}"
        label = f"w{i}-edited" if sid == edit else f"w{i}"
        step: dict[str, Any] = {
            "id": sid,
            "tool": "bench.write",
            "params": {"label": label, "seconds": seconds},
            "timeout_s": 10,
        }
        if i >= width:
            step["dependencies"] = [f"w{i - width:02d}"]
        steps.append(step)
    return Plan.model_validate({"goal": "fork test", "steps": steps})


def downstream(plan: Plan, step_id: str) -> set[str]:
    """``step_id`` and every step that depends on it, directly or not."""
    found = {step_id}
    for step in plan.steps:  # plan order is a topological order here
        if found.intersection(step.dependencies):
            found.add(step.id)
    return found


def effects_of(ps: PrivateStack, sid: str) -> Counter[str]:
    """Writes applied for session ``sid`` (step id -> times), from the audit file."""
    audit = EffectAudit(Path(ps.settings.effect_audit_path))
    prefix = f"{sid}:"
    return Counter(
        key[len(prefix) :]
        for key, n in audit.counts().items()
        if key.startswith(prefix)
        for _ in range(n)
    )


def cli(ps: PrivateStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env(ps.settings.to_env()),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ids(plan: Plan) -> list[str]:
    return [s.id for s in plan.steps]


def test_a_fork_of_an_edited_plan_runs_only_the_changed_steps(
    private_stack: MakeStack, tmp_path: Path
) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = write_chain(8)
    parent = ps.producer.submit(plan)
    assert ps.finish(parent, ids(plan)).status == SessionStatus.COMPLETED
    edited = write_chain(8, edit="w04")
    path = tmp_path / "edited.json"
    path.write_text(edited.model_dump_json())

    done = cli(ps, "fork", parent, "--plan", str(path))

    assert done.returncode == 0, done.stderr
    child = done.stdout.strip()
    record = ps.finish(child, ids(edited))
    assert record.status == SessionStatus.COMPLETED, record.error
    changed = downstream(edited, "w04")  # w04, w06: the chain after the edit
    assert changed == {"w04", "w06"}
    ran = effects_of(ps, child)
    assert dict(ran) == dict.fromkeys(sorted(changed), 1), ran
    assert all(n == 1 for n in effects_of(ps, parent).values())
    steps = report_steps(record)
    assert all(s["status"] == "completed" for s in steps.values())
    info = ps.producer.session(child)
    assert (info.forked_from, info.forked_version) == (parent, 1)
    assert sorted(info.carried) == sorted(set(ids(edited)) - changed)
    row = ps.record.session(child)
    assert row is not None
    assert (row.forked_from, row.forked_version) == (parent, 1)
    assert ps.record.forks_of(parent) == [(child, 1)]
    shown = cli(ps, "show", child)
    assert f"forked from {parent} at plan version 1" in shown.stdout, shown.stdout
    assert f"forked into {child}" in cli(ps, "show", parent).stdout


def test_a_fork_whose_supervisor_is_killed_runs_each_changed_step_once(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = write_chain(16, seconds=0.15)
    with planloop.Client(ps.settings) as client:
        parent = client.submit(plan)
        assert client.wait(parent, timeout_s=60).status == "completed"
        edited = write_chain(16, seconds=0.15, edit="w02")
        child = client.fork(parent, plan=edited)
        changed = downstream(edited, "w02")  # w02, w04, ..., w14: seven steps in a chain
        wait_for(lambda: len(ps.completed(child, sorted(changed))) >= 2, 60, "two re-runs")
        victim = ps.owner_process(child)
        assert victim is not None, "the fork has no live owner"
        ps.signal(victim, signal.SIGKILL)
        ps.start_supervisor()
        record = ps.finish(child, ids(edited))
    assert record.status == SessionStatus.COMPLETED, record.error
    ran = effects_of(ps, child)
    assert dict(ran) == dict.fromkeys(sorted(changed), 1), ran
    carried = set(ids(edited)) - changed
    steps = report_steps(record)
    assert all(steps[i]["status"] == "completed" for i in carried)
    assert {a.step_id for a in ps.record.attempts(child) if a.status == "completed"} >= set(
        ids(edited)
    ), "a carried step has no completed attempt row in the fork's SQL record"


def test_fork_refuses_a_version_the_session_does_not_have(private_stack: MakeStack) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = write_chain(2)
    parent = ps.producer.submit(plan)
    ps.finish(parent, ids(plan))
    with planloop.Client(ps.settings) as client, pytest.raises(PlanVersionNotFoundError):
        client.fork(parent, version=7)

    async def fork_with_the_aio_client() -> str:
        async with AsyncClient(ps.settings) as aio:
            return await aio.fork(parent, version=1)

    forked = asyncio.run(fork_with_the_aio_client())
    assert ps.finish(forked, ids(plan)).status == SessionStatus.COMPLETED
    assert effects_of(ps, forked) == Counter()  # the same plan: every step carried over
    done = cli(ps, "fork", parent, "--version", "7")
    assert done.returncode == 2
    assert "no plan version 7" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def deadline_failed(ps: PrivateStack, plan: Plan, **options: Any) -> tuple[str, set[str]]:
    """A session of ``plan`` that ends failed by its deadline; with the steps it completed."""
    # A cold stack (a worker still starting on a loaded machine) can spend the whole short
    # deadline before its first step: a session run to its end first shows it is warm.
    warm = write_chain(1)
    ps.finish(ps.producer.submit(warm), ids(warm))
    sid = ps.producer.submit(plan, planloop.SessionOptions(deadline_s=1.2, **options))
    record = ps.finish(sid, ids(plan))
    assert record.status == SessionStatus.FAILED, record.error
    assert "deadline" in record.error
    done = ps.completed(sid, ids(plan))
    assert 0 < len(done) < len(ids(plan)), done
    return sid, done


def test_continue_after_the_deadline_runs_only_what_did_not_complete(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = write_chain(16, seconds=0.3)  # 8 levels of 0.3s: the 1.2s deadline ends it halfway
    sid, done_before = deadline_failed(ps, plan, compensate_on_failure=False)
    started = {i: st.started_at for i, st in ps.step_states(sid, sorted(done_before)).items()}
    epoch_before = ps.hot.session(sid).epoch

    done = cli(ps, "continue", sid, "--deadline", "120")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: len(ps.completed(sid, ids(plan))) >= len(done_before) + 2, 60, "progress")
    victim = ps.owner_process(sid)
    assert victim is not None, "the continued session has no live owner"
    ps.signal(victim, signal.SIGKILL)
    ps.start_supervisor()
    record = ps.finish(sid, ids(plan))

    assert record.status == SessionStatus.COMPLETED, record.error
    assert ps.hot.session(sid).epoch > epoch_before + 1  # continued, then taken over
    ran = effects_of(ps, sid)
    assert set(ran) == set(ids(plan)), ran
    assert all(n == 1 for n in ran.values()), f"a write ran twice: {ran}"
    steps = report_steps(record)
    for step_id in done_before:
        assert steps[step_id]["started_at"] == started[step_id], f"{step_id} ran again"
    row = ps.record.session(sid)
    assert row is not None
    assert (row.status, row.continued) == ("completed", 1)


def test_continue_redoes_a_write_its_compensation_undid(private_stack: MakeStack) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = write_chain(10, seconds=0.4)
    sid, done_before = deadline_failed(ps, plan)  # compensate_on_failure: undone at the end
    undone = {
        c["step"]
        for c in (ps.producer.session(sid).report or {}).get("compensations", [])
        if c["status"] == "completed"
    }
    assert undone == done_before

    with planloop.Client(ps.settings) as client:
        client.continue_session(sid, deadline_s=120)
        report = client.wait(sid, timeout_s=60)

    assert report.status == "completed"
    ran = effects_of(ps, sid)
    # the first writes once each, their undo once each, a redo (new key) once each
    for step_id in done_before:
        assert ran[step_id] == 1, ran
        assert ran[f"{step_id}:compensate:undo"] == 1, ran
        assert ran[f"{step_id}:redo1"] == 1, ran
    assert all(n == 1 for n in ran.values()), ran
    assert ps.producer.session(sid).redone == dict.fromkeys(done_before, 1)


def test_continue_after_a_spent_replan_budget_runs_the_failed_step_again(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = Plan.model_validate(
        {
            "goal": "a step that fails once, with no re-plan allowed",
            "steps": [
                {"id": "a", "tool": "bench.write", "params": {"label": "a"}},
                {
                    "id": "b",
                    "tool": "bench.sleep",
                    "params": {"seconds": 0, "fail_attempts": [1]},
                    "max_retries": 0,
                    "critical": True,
                    "dependencies": ["a"],
                },
                {"id": "c", "tool": "bench.write", "params": {"label": "c"}, "dependencies": ["b"]},
            ],
        }
    )
    sid = ps.producer.submit(plan, planloop.SessionOptions(max_replans=0))
    ended = ps.finish(sid, ids(plan))
    assert ended.status == SessionStatus.ABORTED
    assert "re-plan budget spent" in ended.error  # the abort undid a's write

    done = cli(ps, "continue", sid, "--max-replans", "1")

    assert done.returncode == 0, done.stderr
    record = ps.finish(sid, ids(plan))
    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    assert steps["b"]["attempts"] == 2  # attempt 1 failed before, attempt 2 ran now
    ran = effects_of(ps, sid)
    assert ran == Counter({"a": 1, "a:compensate:undo": 1, "a:redo1": 1, "c": 1}), ran
    assert ps.producer.session(sid).options.max_replans == 1


def test_continue_refuses_a_completed_or_running_session(private_stack: MakeStack) -> None:
    ps = private_stack(workers=1, supervisors=1)
    plan = write_chain(2)
    finished = ps.producer.submit(plan)
    ps.finish(finished, ids(plan))
    done = cli(ps, "continue", finished)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "only a session that ended failed or aborted" in done.stderr, done.stderr
    slow = write_chain(2, seconds=3)
    running = ps.producer.submit(slow)
    wait_for(lambda: ps.owner_process(running) is not None, 30, "an owner")
    with planloop.Client(ps.settings) as client, pytest.raises(ContinueRefusedError) as exc:
        client.continue_session(running)
    assert "still running" in str(exc.value)
    assert json.loads(ps.redis.hget(ps.keys.session(running), "options") or "{}") == {}
