"""Worker pools with real workers: each step runs on a worker that serves its tool.

Workers started with different ``PLANLOOP_TOOL_MODULES`` consume different pool queues
(core/routing.py); the supervisor routes by their heartbeats. Explicit routing (a step's
``queue:``, ``PLANLOOP_TOOL_QUEUES``, ``planloop worker --queues``) sends steps where it says.
A step whose tool no live worker serves waits with a WARNING naming the tool, and runs once a
worker serving it starts, or fails ``unserved`` when ``unserved_wait_s`` passes.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from collections.abc import Mapping

import pytest
from rich.console import Console

from planloop.console.data import session_detail
from planloop.core.heartbeat import Heartbeat, live_workers
from planloop.core.models import ErrorKind, EventType, SessionStatus, Severity, StepState
from planloop.core.routing import pool_queue
from planloop.planner.plan import parse_plan
from planloop.producer.watch import watch_session
from planloop.workers.toolsets import BENCH_TOOLS
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack

pytestmark = pytest.mark.integration

# The shipped workers import it as `pool_tools` (tests/tool_modules, on their path). This
# process imports it too, as a producer that has a tool's code may: the waiting tests submit
# plans using it while no worker serving it has published it yet.
import tests.tool_modules.pool_tools  # noqa: E402, F401

POOL_TOOLS = "pool_tools"

# Tools of both pools, with references across them.
BOTH = """
steps:
  - {id: hi, tool: pool.greet, params: {name: ann}}
  - {id: e1, tool: bench.echo, params: {value: 1}}
  - {id: e2, tool: bench.echo, params: {value: "{{hi.output.text}}"}, dependencies: [hi]}
  - {id: hi2, tool: pool.greet, params: {name: bob}, dependencies: [e1]}
  - {id: last, tool: bench.sleep, params: {seconds: 0.05}, dependencies: [e2, hi2]}
"""


def cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """The ``planloop`` command line, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "planloop.producer.cli", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def pid_of(state: StepState) -> int:
    """The worker process that ran the step (the executor records ``host:pid``)."""
    return int(state.worker.rpartition(":")[2])


def wait_workers(built: PrivateStack, count: int) -> list[Heartbeat]:
    """The live workers' heartbeats once ``count`` of them beat."""
    keys, queue = built.keys, built.settings.queue
    return wait_for(
        lambda: (beats := live_workers(built.redis, keys, queue)) and len(beats) >= count and beats,
        60,
        f"{count} worker heartbeats",
    )


def both_pools(private_stack: MakeStack, **overrides: object) -> PrivateStack:
    """A stack with no worker yet, whose supervisor and producer import neither toolset's
    test module: they know ``pool.greet`` from the catalogue its workers publish."""
    return private_stack(workers=0, **overrides)


def test_two_toolsets_on_two_workers_serve_one_plan(private_stack: MakeStack) -> None:
    built = both_pools(private_stack)
    greeter = built.start_worker(4, tool_modules=[POOL_TOOLS])
    bencher = built.start_worker(4, tool_modules=[BENCH_TOOLS])
    beats = wait_workers(built, 2)
    # Each consumes the pool queue of its own tool set, and says so.
    for hb in beats:
        assert hb.queues == [pool_queue(built.settings.queue, hb.tools)]
    assert len({hb.queues[0] for hb in beats}) == 2

    plan = parse_plan(BOTH)
    sids = [built.producer.submit(plan) for _ in range(5)]
    for sid in sids:
        record = built.finish(sid, plan.step_ids)
        assert record.status == SessionStatus.COMPLETED, record.error
        states = built.step_states(sid, plan.step_ids)
        for step in plan.steps:
            want = greeter if step.tool.startswith("pool.") else bencher
            assert pid_of(states[step.id]) == want.pid, (sid, step.id, states[step.id].worker)
            assert states[step.id].attempt == 1  # never refused by a worker lacking the tool
            assert states[step.id].queue.startswith(f"{built.settings.queue}.")


def test_explicit_queues_take_their_steps(private_stack: MakeStack) -> None:
    built = private_stack(workers=0, supervisors=0)
    gpu = f"{built.settings.queue}.gpu"
    built.stack.env["PLANLOOP_TOOL_QUEUES"] = f'{{"bench.sleep": "{gpu}"}}'
    built.start_supervisor()  # the tool -> queue setting is the supervisor's
    plain = built.start_worker(4)
    special = built.start_worker(4, queues=[gpu])
    beats = wait_workers(built, 2)
    assert sorted(len(hb.queues) for hb in beats) == [1, 2]
    assert any(gpu in hb.queues for hb in beats)

    plan = parse_plan(
        f"""
steps:
  - {{id: pinned, tool: bench.echo, params: {{value: 1}}, queue: {gpu}}}
  - {{id: mapped, tool: bench.sleep, params: {{seconds: 0.01}}}}
  - {{id: free, tool: bench.echo, params: {{value: 2}}, dependencies: [pinned, mapped]}}
"""
    )
    assert plan.step("pinned").queue == gpu
    for _ in range(3):
        sid = built.producer.submit(plan)
        record = built.finish(sid, plan.step_ids)
        assert record.status == SessionStatus.COMPLETED, record.error
        states = built.step_states(sid, plan.step_ids)
        assert pid_of(states["pinned"]) == special.pid
        assert pid_of(states["mapped"]) == special.pid
        assert states["pinned"].queue == states["mapped"].queue == gpu
        # routed automatically: to the pool queue both workers share
        assert states["free"].queue == pool_queue(built.settings.queue, beats[0].tools)
        assert pid_of(states["free"]) in (plain.pid, special.pid)


def test_a_step_no_worker_serves_waits_warns_and_runs_once_one_starts(
    private_stack: MakeStack,
) -> None:
    built = both_pools(private_stack)
    built.start_worker(4, tool_modules=[BENCH_TOOLS])
    wait_workers(built, 1)
    plan = parse_plan(BOTH)
    sid = built.producer.submit(plan)

    def warning() -> list[str]:
        return [
            ev.description
            for _, ev in built.hot.events(sid)
            if ev.type == EventType.EXTERNAL_SIGNAL
            and ev.severity == Severity.WARNING
            and ev.payload.get("notice") == "unserved"
        ]

    warned = wait_for(warning, 30, "the WARNING that no worker serves pool.greet")
    assert len(warned) == 1
    assert "pool.greet" in warned[0]
    # status, watch and the console show it
    status = cli("status", sid, env=built.stack.env)
    assert status.returncode == 0, status.stderr
    assert "WARNING      no live worker serves pool.greet" in status.stdout, status.stdout
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    watch_session(built.producer, sid, console=console, timeout_s=0.3)
    assert isinstance(console.file, io.StringIO)
    watched = console.file.getvalue()
    assert "WARNING note unserved" in watched, watched
    assert "no live worker serves pool.greet" in watched
    detail = session_detail(built.producer, sid)
    assert any("pool.greet" in ev["description"] for ev in detail["events"])
    assert detail["steps"]["hi"]["note"] == "waiting for a worker that serves pool.greet"
    # The bench step that needs no greeting ran meanwhile.
    wait_for(
        lambda: built.step_states(sid, ["e1"])["e1"].status.value == "completed", 30, "e1 done"
    )

    greeter = built.start_worker(4, tool_modules=[POOL_TOOLS])
    record = built.finish(sid, plan.step_ids)
    assert record.status == SessionStatus.COMPLETED, record.error
    states = built.step_states(sid, plan.step_ids)
    assert pid_of(states["hi"]) == pid_of(states["hi2"]) == greeter.pid
    assert len(warning()) == 1  # one warning per tool (hi and hi2 waited), not per turn


def test_a_step_no_worker_serves_fails_unserved_when_the_wait_ends(
    private_stack: MakeStack,
) -> None:
    built = both_pools(private_stack, unserved_wait_s=1.5)
    built.start_worker(4, tool_modules=[BENCH_TOOLS])
    wait_workers(built, 1)
    plan = parse_plan("steps: [{id: hi, tool: pool.greet, params: {name: ann}}]")
    sid = built.producer.submit(plan)
    record = built.finish(sid, ["hi"])
    assert record.status == SessionStatus.FAILED
    assert "no worker serves pool.greet" in record.error  # not "completed" around it
    state = built.step_states(sid, ["hi"])["hi"]
    assert state.error_kind == ErrorKind.UNSERVED, state
    assert "pool.greet" in state.error
    assert "waited" in state.error
    assert not state.worker  # never sent: no worker ever refused it


def test_an_attempt_stranded_in_a_frozen_pool_moves_to_a_live_one(
    private_stack: MakeStack,
) -> None:
    built = both_pools(private_stack, watchdog_grace_s=0.5)
    frozen = built.start_worker(2, tool_modules=[BENCH_TOOLS, POOL_TOOLS])
    (beat,) = wait_workers(built, 1)
    built.signal(frozen, signal.SIGSTOP)  # its heartbeat holds for three periods more
    try:
        plan = parse_plan("steps: [{id: e, tool: bench.echo, params: {value: 1}, timeout_s: 1}]")
        sid = built.producer.submit(plan)
        wait_for(
            lambda: built.step_states(sid, ["e"])["e"].queue == beat.queues[0],
            30,
            "the step sent to the frozen worker's pool",
        )
        other = built.start_worker(2, tool_modules=[BENCH_TOOLS])  # another pool serves it
        record = built.finish(sid, ["e"], timeout_s=60)
        assert record.status == SessionStatus.COMPLETED, record.error
        state = built.step_states(sid, ["e"])["e"]
        assert pid_of(state) == other.pid
        assert state.attempt == 1  # the same attempt, re-sent: nothing ran twice
        assert state.queue == pool_queue(built.settings.queue, live_tools(built, other.pid))
    finally:
        built.signal(frozen, signal.SIGKILL)


def live_tools(built: PrivateStack, pid: int) -> list[str]:
    """The tools the live worker of process ``pid`` serves, by its heartbeat."""
    beats = live_workers(built.redis, built.keys, built.settings.queue)
    return next(hb.tools for hb in beats if hb.worker.startswith(f"planloop-{pid}@"))
