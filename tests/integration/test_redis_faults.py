"""Redis faults: the supervisor and the worker ride them out and the session still completes.

Each test runs a private Redis (``private_redis``) and a private stack pointed at it, starts
a session of a few ``bench.write`` steps, injects one fault while a step runs, and checks
that the session completes, that the supervisor and the worker are still alive, and (where
Redis keeps its data) that every effect was applied once. After a data loss duplicate
effects are possible (the durable effect ledger has tests of its own): they are printed, not
asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest

from planloop.core.models import SessionStatus
from planloop.planner.plan import Plan
from planloop.producer.stack import EmbeddedRedis, free_port
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import MakeRedis, wait_for
from tests.integration.conftest import MakeStack, PrivateStack
from tests.shipped import shipped

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

STEPS = 5
STEP_SECONDS = 0.4
# How long the "unreachable" test keeps Redis down; nothing in the code gives up before 60 s
# (PLANLOOP_TEST_REDIS_OUTAGE_S=65 proves it, in about 1.5 minutes).
OUTAGE_S = float(os.environ.get("PLANLOOP_TEST_REDIS_OUTAGE_S", "8"))


def write_plan(name: str) -> Plan:
    """A chain of write steps, each long enough for a fault to land while it runs."""
    return Plan.model_validate(
        {
            "goal": f"redis fault: {name}",
            "steps": [
                {
                    "id": f"w{i}",
                    "tool": "bench.write",
                    "params": {"label": f"{name}-{i}", "seconds": STEP_SECONDS},
                    "timeout_s": 3,
                    "max_retries": 5,
                    "dependencies": [f"w{i - 1}"] if i else [],
                }
                for i in range(STEPS)
            ],
        }
    )


def faulty_stack(
    private_redis: MakeRedis, private_stack: MakeStack
) -> tuple[EmbeddedRedis, PrivateStack]:
    server = private_redis()
    ps = private_stack(redis_url=server.url, watchdog_grace_s=0.5)
    return server, ps


def alive(ps: PrivateStack) -> None:
    """Every supervisor and worker of ``ps`` still runs."""
    dead = {p.pid: p.returncode for p in ps.supervisors + ps.workers if p.poll() is not None}
    logs = "\n".join(
        path.read_text(errors="replace")[-3000:] for path in ps.stack.log_dir.glob("*.log")
    )
    assert not dead, f"processes died (pid: exit code) {dead}\n{logs}"


def mid_session(ps: PrivateStack, sid: str, ids: list[str]) -> None:
    """Wait until one step completed and the next one runs: the fault lands mid-session."""
    wait_for(lambda: len(ps.completed(sid, ids)) >= 1, 30, f"a first step of {sid}")
    wait_for(
        lambda: any(st.status == "running" for st in ps.step_states(sid, ids).values()),
        10,
        f"a running step of {sid}",
    )


def run_with_fault(
    ps: PrivateStack, name: str, fault: Callable[[], None], *, keeps_data: bool
) -> None:
    plan = write_plan(name)
    ids = [s.id for s in plan.steps]
    sid = ps.producer.submit(plan)
    mid_session(ps, sid, ids)
    fault()
    record = ps.finish(sid, ids, 60, f"after {name}")
    assert record.status == SessionStatus.COMPLETED, f"{name}: {record.status} {record.error}"
    alive(ps)
    counts = {i: ps.effects.count(f"{sid}:{i}") for i in ids}
    print(f"\n{name}: effects per step {counts}")
    if keeps_data:
        assert all(c == 1 for c in counts.values()), f"{name}: effects not once: {counts}"


def test_client_kill(private_redis: MakeRedis, private_stack: MakeStack) -> None:
    _server, ps = faulty_stack(private_redis, private_stack)

    def kill_clients() -> None:
        for _ in range(3):
            ps.redis.client_kill_filter(_type="normal")
            time.sleep(0.2)  # three drops, spread over a step

    run_with_fault(ps, "client-kill", kill_clients, keeps_data=True)


def test_restart_with_data(private_redis: MakeRedis, private_stack: MakeStack) -> None:
    server, ps = faulty_stack(private_redis, private_stack)
    run_with_fault(ps, "restart-keep", lambda: server.restart(keep_data=True), keeps_data=True)


def test_restart_without_data(private_redis: MakeRedis, private_stack: MakeStack) -> None:
    server, ps = faulty_stack(private_redis, private_stack)
    run_with_fault(ps, "restart-empty", lambda: server.restart(keep_data=False), keeps_data=False)


def test_flushall_mid_session(private_redis: MakeRedis, private_stack: MakeStack) -> None:
    _server, ps = faulty_stack(private_redis, private_stack)
    run_with_fault(ps, "flushall", lambda: ps.redis.flushall(), keeps_data=False)


@pytest.mark.timeout(OUTAGE_S + 100)
def test_unreachable_for_a_while(private_redis: MakeRedis, private_stack: MakeStack) -> None:
    """Redis down for OUTAGE_S (nothing in the code gives up before 60 s): processes wait."""
    server, ps = faulty_stack(private_redis, private_stack)

    def outage() -> None:
        ps.redis.save()  # keeps its data, as a network outage would
        assert server.process is not None
        server.process.terminate()
        server.process.wait(10)
        until = time.monotonic() + OUTAGE_S
        # The outage itself is the fault: the processes must stay up all along.
        wait_for(lambda: alive(ps) is None and time.monotonic() > until, OUTAGE_S + 5, "outage")
        server.start()

    run_with_fault(ps, "unreachable", outage, keeps_data=True)
    log = ps.supervisor_log(ps.supervisors[0])
    assert log.count("redis unreachable at") >= 1, log[-3000:]
    assert "redis back after" in log, log[-3000:]


def test_redis_frozen_for_a_while(private_redis: MakeRedis, private_stack: MakeStack) -> None:
    """Redis hangs (SIGSTOP) past the lease TTL, connections open: processes wait it out."""
    server, ps = faulty_stack(private_redis, private_stack)

    def freeze() -> None:
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)
        try:
            until = time.monotonic() + ps.settings.lease_ttl_s * 3
            wait_for(lambda: alive(ps) is None and time.monotonic() > until, 30, "the freeze")
        finally:
            server.process.send_signal(signal.SIGCONT)

    run_with_fault(ps, "redis-frozen", freeze, keeps_data=True)


@pytest.mark.parametrize("supervisors", [1, 2])
def test_supervisor_frozen_past_its_lease(
    private_redis: MakeRedis, private_stack: MakeStack, supervisors: int
) -> None:
    """SIGSTOP of the owning supervisor past its lease, then SIGCONT: it carries on.

    Alone, it takes the session back at a new epoch; with a peer, the peer takes it over
    and the woken one lets it go (its writes are fenced out) and keeps serving.
    """
    server = private_redis()
    ps = private_stack(redis_url=server.url, supervisors=supervisors, watchdog_grace_s=0.5)
    frozen: list[subprocess.Popen[bytes]] = []

    def freeze() -> None:
        sid = ps.hot.session_ids(1)[0]
        owner = wait_for(lambda: ps.owner_process(sid), 10, "the owner")
        epoch = ps.hot.session(sid).epoch
        frozen.append(owner)
        ps.signal(owner, signal.SIGSTOP)
        try:
            until = time.monotonic() + ps.settings.lease_ttl_s * 3
            wait_for(
                lambda: (
                    time.monotonic() > until
                    and (supervisors == 1 or ps.hot.session(sid).epoch > epoch)
                ),
                30,
                "the lease to run out (and a peer to take over)",
            )
        finally:
            ps.signal(owner, signal.SIGCONT)

    run_with_fault(ps, f"sigstop-{supervisors}", freeze, keeps_data=True)
    wait_for(
        lambda: any(m in ps.supervisor_log(frozen[0]) for m in ("lease lost", "fenced out")),
        10,
        "the woken supervisor to let the session go",
    )
    alive(ps)


def children_of(pid: int) -> list[int]:
    """Pids of the live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


def test_up_restarts_dead_children(
    private_redis: MakeRedis, private_stack: MakeStack, tmp_path: Path
) -> None:
    """`planloop up` starts again a SIGKILLed worker and supervisor, then runs a session."""
    server = private_redis()
    ps = private_stack(redis_url=server.url, workers=0, supervisors=0)
    out = tmp_path / "up.out"
    with out.open("wb") as sink:
        up = subprocess.Popen(
            [*shipped().cli(), "up"],
            # the web console is a child too; on a port of its own
            env={**ps.stack.env, "PLANLOOP_CONSOLE_PORT": str(free_port())},
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "stack ready" in out.read_text(), 60, "planloop up to be ready")
        old = children_of(up.pid)
        assert len(old) == 3, old  # a worker, a supervisor, the console
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: out.read_text().count("restarted as pid") == 3,
            30,
            f"planloop up to restart its children; output:\n{out.read_text()}",
        )
        assert up.poll() is None, out.read_text()
        assert not set(children_of(up.pid)) & set(old)
        plan = write_plan("restarted")
        ids = [s.id for s in plan.steps]
        sid = ps.producer.submit(plan)
        record = ps.finish(sid, ids, 60, "after the restarts")
        assert record.status == SessionStatus.COMPLETED
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(30)
    assert up.returncode == 0, out.read_text()


def test_worker_that_must_stop_exits_non_zero(private_stack: MakeStack, tmp_path: Path) -> None:
    """A worker stopped by an unrecoverable broker failure exits 1, so a `restart:
    on-failure` policy brings it back (Celery's worker_main used to turn it into 0)."""
    ps = private_stack(workers=0, supervisors=0)
    broken = (
        "import celery.worker.consumer.consumer as c\n"
        "def start(self):\n"
        "    raise RuntimeError('broker gone for good (simulated)')\n"
        "c.Consumer.start = start\n"
        "from planloop.producer.cli import main\n"
        "main(['worker', '--loglevel', 'WARNING'])\n"
    )
    done = subprocess.run(
        [str(shipped().python), "-c", broken],
        env=ps.stack.env,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert b"broker gone for good" in done.stderr + done.stdout
    assert done.returncode == 1, done.stderr[-2000:]


def test_a_supervisor_started_while_redis_is_down_waits_for_it(
    private_redis: MakeRedis, private_stack: MakeStack
) -> None:
    """Started (or restarted by `up`) during an outage, it waits instead of exiting."""
    server, ps = faulty_stack(private_redis, private_stack)
    ps.redis.save()
    assert server.process is not None
    server.process.terminate()
    server.process.wait(10)
    late = ps.start_supervisor()
    wait_for(
        lambda: "redis unreachable at" in ps.supervisor_log(late), 30, "the outage to be noticed"
    )
    assert late.poll() is None, ps.supervisor_log(late)[-3000:]
    server.start()

    plan = write_plan("started-while-down")
    ids = [s.id for s in plan.steps]
    record = ps.finish(ps.producer.submit(plan), ids, 60, "after the late start")

    assert record.status == SessionStatus.COMPLETED, record.error
    alive(ps)
