"""Many hosts, for real: Planloop across Linux network namespaces, one worker host's link cut.

Hosts (namespaces on a private switch, :mod:`tests.integration.netns`): ``data`` runs Redis
and a PostgreSQL of its own; ``sup1`` and ``sup2`` a supervisor each; ``w1`` and ``w2`` a
plain ``planloop worker`` each; ``prod`` the producer CLI. Every Planloop process is the
shipped one (:mod:`tests.shipped`) started through ``ip netns exec``, and reaches the others
over the switch only; the test process watches from the root namespace through the data
host's Unix sockets. Mid-run, just after a slow step starts on ``w1``, ``w1``'s link is cut
until the supervisor has run that step again elsewhere (its timeout plus grace) and at
least ``CUT_S`` seconds, then restored.

Two forms of the same run:

- ``shared``: both workers serve the same tools (bench and qa).
- ``pools``: ``w1`` serves bench, ``w2`` qa (and both the entry-point toolsets); every
  plan needs both, and each step reaches a worker of its tool's pool.

Asserted: every session completes; each write is applied once, counted in the workers'
audit files (outside Redis); each step has one completed attempt in the SQL record and no
attempt after it; the step caught on ``w1`` ran again (attempt 2 or later); both worker
hosts ran steps, and the cut one ran steps after its link came back. The run's figures are
printed (``-s``) for the record.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from planloop.config.settings import Settings
from planloop.core.effects import EffectAudit
from planloop.core.heartbeat import read_heartbeats
from planloop.core.hot_state import HotState, connect
from planloop.core.keys import Keys
from planloop.core.models import SessionStatus, StepStatus
from planloop.core.record import SqlRecord
from planloop.producer.client import Producer
from planloop.producer.stack import Stack, redis_server_binary
from planloop.workers.toolsets import BENCH_TOOLS
from planloop.workers.toolsets.qa import QA_TOOLS
from tests.conftest import TEST_REDIS_SERVER, wait_for
from tests.integration import netns
from tests.integration.conftest import wait_ended
from tests.integration.netns import Host, Network, Service
from tests.shipped import shipped

pytestmark = pytest.mark.integration

SESSIONS_BEFORE_CUT = 6  # submitted at the start
SESSIONS_AFTER_CUT = 2  # submitted once the link is back: work the cut host must share
CUT_S = 6.0  # the shortest outage: past a step's timeout plus grace, short of 15 s (a
# worker unheard of for three heartbeats counts as gone)
WORKER_THREADS = 3
WRITE_STEPS = ("w1", "w2", "reserve", "w3")


def session_plan(n: int) -> dict[str, Any]:
    """Eight steps over bench, qa and supply_chain tools; four of them writes.

    Timeouts are short so an attempt lost with the cut link is retried during the outage.
    """
    common = {"timeout_s": 3, "max_retries": 6}
    steps = [
        {"id": "warm", "tool": "bench.sleep", "params": {"seconds": 1.0}},
        {"id": "city", "tool": "qa.capital", "params": {"subject": f"Region {n}"}},
        {"id": "stock", "tool": "supply_chain.erp_stock", "params": {"sku": f"SKU{n:05d}"}},
        {"id": "w1", "tool": "bench.write", "params": {"label": f"s{n}-w1", "seconds": 1.0},
         "dependencies": ["warm"]},
        {"id": "w2", "tool": "bench.write", "params": {"label": f"s{n}-w2", "seconds": 1.0},
         "dependencies": ["city"]},
        {"id": "founder", "tool": "qa.founder", "params": {"subject": "{{city.output.value}}"},
         "dependencies": ["city", "w1"]},
        {"id": "reserve", "tool": "supply_chain.reserve_stock",
         "params": {"sku": f"SKU{n:05d}", "qty": "{{stock.output.shortfall}}"},
         "dependencies": ["stock", "w1"]},
        {"id": "w3", "tool": "bench.write", "params": {"label": f"s{n}-w3", "seconds": 1.0},
         "dependencies": ["founder", "reserve", "w2"]},
    ]  # fmt: skip
    return {"goal": f"multi-host session {n}", "steps": [{**common, **s} for s in steps]}


STEP_IDS = [s["id"] for s in session_plan(0)["steps"]]
TOOLS = {s["id"]: s["tool"] for s in session_plan(0)["steps"]}
SLOW_TOOLS = {"bench.sleep", "bench.write"}  # a second each in session_plan


def cli(*args: str, host: Host, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the shipped ``planloop`` CLI on ``host`` (the one place that names the command)."""
    return subprocess.run(
        [*host.prefix, *shipped().cli(), *args],
        env=env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass
class Cluster:
    """The hosts and the data host's services, for one test module."""

    net: Network
    hosts: dict[str, Host]
    redis: Service
    postgres: Service
    directory: Path


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Six hosts; Redis and PostgreSQL running on ``data``. Whatever fails, the services are
    stopped and the namespaces deleted (with any process still in them) after the module."""
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"multi-host test needs network namespaces: {reason}")
    run_id = f"pl{uuid.uuid4().hex[:6]}"
    directory = Path(tempfile.mkdtemp(prefix=f"planloop-{run_id}-"))
    directory.chmod(0o755)  # the PostgreSQL user reaches its own sub-directory through it
    net = Network.create(run_id)
    services: list[Service] = []
    try:
        hosts = {n: net.add_host(n) for n in ("data", "sup1", "sup2", "w1", "w2", "prod")}
        redis_dir, pg_dir = directory / "redis", directory / "pg"
        redis_dir.mkdir()
        pg_dir.mkdir()
        binary = TEST_REDIS_SERVER or redis_server_binary()
        services.append(netns.start_redis(hosts["data"], binary, redis_dir))
        services.append(netns.start_postgres(hosts["data"], pg_dir))
        redis_service, pg_service = services
        wait_for(lambda: _redis_answers(redis_service.local_url), 30, "Redis on the data host")
        wait_for(lambda: _pg_answers(pg_service.local_url), 60, "PostgreSQL on the data host")
        # The schema made once, before two supervisors start and would both migrate it.
        SqlRecord.from_url(pg_service.local_url).engine.dispose()
        yield Cluster(net, hosts, redis_service, pg_service, directory)
    finally:
        for service in reversed(services):
            service.stop()
        net.destroy()
        shutil.rmtree(directory, ignore_errors=True)


def _redis_answers(url: str) -> bool:
    client = connect(url)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _pg_answers(url: str) -> bool:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("select 1")).scalar() == 1
    except OperationalError:
        return False
    finally:
        engine.dispose()


@dataclass
class Run:
    """One form of the run on the cluster: its settings, stacks and observers."""

    cluster: Cluster
    settings: Settings  # what the hosts use (addresses on the switch)
    directory: Path
    stacks: dict[str, Stack] = field(default_factory=dict)
    sids: list[str] = field(default_factory=list)

    def env(self, **overrides: Any) -> dict[str, str]:
        """The environment of a process on a host: the shipped product's, with these
        settings plus ``overrides``."""
        settings = self.settings.model_copy(update=overrides)
        return shipped().env({**os.environ, **settings.to_env()})

    def stack(self, host: str, **overrides: Any) -> Stack:
        """The processes of ``host``: shipped ones, each started through ``ip netns exec``."""
        log_dir = self.directory / f"logs-{host}"
        log_dir.mkdir()
        built = Stack(
            env=self.env(**overrides),
            log_dir=log_dir,
            command=[*self.cluster.hosts[host].prefix, *shipped().cli()],
            cwd=shipped().home,
        )
        self.stacks[host] = built
        return built

    def audit_path(self, host: str) -> Path:
        return self.directory / f"effects-{host}.jsonl"

    def submit(self, n: int) -> str:
        plan_file = self.directory / f"plan-{n}.yaml"
        plan_file.write_text(yaml.safe_dump(session_plan(n)))
        done = cli(
            "submit", "--json", str(plan_file), host=self.cluster.hosts["prod"], env=self.env()
        )
        assert done.returncode == 0, f"submit on the producer host: {done.stderr}"
        sid = str(json.loads(done.stdout.strip().splitlines()[-1])["session_id"])
        self.sids.append(sid)
        return sid

    def submit_all(self, numbers: range) -> None:
        """Submit these sessions from the producer host at once (a CLI start takes seconds)."""
        with ThreadPoolExecutor(len(numbers)) as pool:
            list(pool.map(self.submit, numbers))

    def worker_host(self, worker: str) -> str:
        """The host of a worker, by the pid in its name: ``<hostname>:<pid>`` in step states
        and attempt rows, ``planloop-<pid>@<hostname>`` in heartbeats ('' if none)."""
        for host, built in self.stacks.items():
            for proc in built.processes:
                if worker.endswith(f":{proc.pid}") or worker.startswith(f"planloop-{proc.pid}@"):
                    return host
        return ""

    def stop(self) -> None:
        for built in self.stacks.values():
            built.stop()


MakeRun = Callable[[dict[str, list[str]]], Run]


@pytest.fixture
def make_run(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeRun]:
    """A factory of runs (own key prefix and queue); their processes stopped after."""
    made: list[Run] = []

    def make(tool_modules: dict[str, list[str]]) -> Run:
        """Two supervisors, and a worker on each host of ``tool_modules`` serving those."""
        prefix = f"mh{uuid.uuid4().hex[:6]}"
        directory = tmp_path_factory.mktemp(prefix)  # logs, plans, audits: kept by pytest
        settings = Settings(
            redis_url=cluster.redis.url,
            database_url=cluster.postgres.url,
            key_prefix=prefix,
            queue=prefix,
            tool_modules=sorted({m for ms in tool_modules.values() for m in ms}),
            default_step_timeout_s=30,
            retry_backoff_s=0.05,
            watchdog_grace_s=1.0,
            lease_ttl_s=1.5,
            breaker_failures=100_000,  # a cut link is not a broken tool
        )
        run = Run(cluster, settings, directory)
        made.append(run)
        for host in ("sup1", "sup2"):
            run.stack(host).start_supervisor()
        for host, modules in tool_modules.items():
            audit = str(run.audit_path(host))
            built = run.stack(host, tool_modules=modules, effect_audit_path=audit)
            built.start_worker(WORKER_THREADS)
        return run

    yield make
    for run in made:
        run.stop()


def local_observers(run: Run) -> tuple[Producer, HotState, SqlRecord]:
    """The test's own view, from the root namespace through the data host's Unix sockets."""
    local = run.settings.model_copy(
        update={"redis_url": run.cluster.redis.local_url,
                "database_url": run.cluster.postgres.local_url}
    )  # fmt: skip
    producer = Producer.from_settings(local)
    return (
        producer,
        HotState(producer.state.r, Keys(local.key_prefix)),
        SqlRecord.from_url(local.database_url),
    )


FORMS = {
    "shared": {"w1": [BENCH_TOOLS, QA_TOOLS], "w2": [BENCH_TOOLS, QA_TOOLS]},
    "pools": {"w1": [BENCH_TOOLS], "w2": [QA_TOOLS]},
}
# In the pools form, the host each toolset's steps must run on (supply_chain is an entry
# point toolset: every worker serves it).
POOL_OF = {"bench": "w1", "qa": "w2"}


@dataclass
class Cut:
    """What happened around the outage, for the figures and the checks."""

    at_s: float  # seconds into the run
    caught: tuple[str, str]  # (session, step) running on w1 when its link went down
    length_s: float = 0.0
    restored_at: float = 0.0  # wall clock (attempt rows carry wall-clock times)
    completed_meanwhile: int = 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "form",
    [
        "shared",
        "pools",
    ],
)
def test_sessions_across_hosts_survive_a_cut_worker_link(make_run: MakeRun, form: str) -> None:
    run = make_run(FORMS[form])
    producer, hot, record = local_observers(run)
    try:
        wait_for(lambda: live_worker_hosts(run, hot) == {"w1", "w2"}, 90, "both heartbeats")
        started = time.monotonic()
        cut = drive(run, hot, started)
        for sid in run.sids:
            wait_ended(producer, sid, 150)
        elapsed = time.monotonic() - started
        figures = check_run(run, producer, record, cut, form)
    finally:
        producer.state.r.close()
        record.engine.dispose()
    print(
        f"\nmany hosts ({form}): {len(run.sids)} sessions, {figures['steps']} steps in "
        f"{elapsed:.1f}s; {figures['attempts']} attempts ({figures['reruns']} re-runs of "
        f"attempts lost or late); w1 cut for {cut.length_s:.1f}s at {cut.at_s:.1f}s "
        f"({cut.completed_meanwhile} steps completed meanwhile); completed by host "
        f"{figures['by_host']}; {figures['applied']} writes applied for {figures['keys']} "
        f"keys, none twice (audit lines by host {figures['audit_lines']})"
    )


def drive(run: Run, hot: HotState, started: float) -> Cut:
    """Submit; once a slow step has just started on w1, cut w1's link until the supervisor
    has given that attempt up (and at least ``CUT_S``); restore it; submit more."""
    run.submit_all(range(SESSIONS_BEFORE_CUT))

    def just_started_on_w1() -> tuple[str, str, int] | None:
        fail_if_any_session_failed(run, hot, "before the cut")
        if completed_steps(run, hot) < 4:  # mid-run: some of it is done
            return None
        now = time.time()
        for sid in run.sids:
            for step, st in hot.steps(sid, STEP_IDS).items():
                if (
                    st.status == StepStatus.RUNNING
                    and TOOLS[step] in SLOW_TOOLS
                    and run.worker_host(st.worker) == "w1"
                    and now - st.started_at < 0.5  # its outcome is due after the cut
                ):
                    return sid, step, st.attempt
        return None

    found = wait_for(just_started_on_w1, 90, "a slow step to start on w1")
    assert found is not None  # wait_for returns a true value
    sid, step, attempt = found
    w1 = run.cluster.hosts["w1"]
    cut_from = time.monotonic()
    cut = Cut(at_s=cut_from - started, caught=(sid, step))
    before = completed_steps(run, hot)
    run.cluster.net.cut(w1)
    wait_for(
        lambda: hot.steps(sid, [step])[step].attempt > attempt,
        15,  # its timeout plus grace, with room; a worker counts as gone after 15 s
        f"the supervisor to run {sid}:{step} again while w1 is cut off",
    )
    # The rest of the outage is the fault being injected, not a wait on state.
    time.sleep(max(0.0, CUT_S - (time.monotonic() - cut_from)))
    cut.completed_meanwhile = completed_steps(run, hot) - before
    run.cluster.net.restore(w1)
    cut.restored_at = time.time()
    cut.length_s = time.monotonic() - cut_from
    run.submit_all(range(SESSIONS_BEFORE_CUT, SESSIONS_BEFORE_CUT + SESSIONS_AFTER_CUT))
    return cut


def check_run(
    run: Run, producer: Producer, record: SqlRecord, cut: Cut, form: str
) -> dict[str, Any]:
    """Assert what the run must leave behind; return its figures."""
    ended = {sid: producer.session(sid) for sid in run.sids}
    failed = {
        s: (r.status, r.error) for s, r in ended.items() if r.status != SessionStatus.COMPLETED
    }
    assert not failed, f"{form}: sessions that did not complete: {failed}"

    # Each write applied once, counted where each worker host applied it (outside Redis).
    audits = {host: EffectAudit(run.audit_path(host)).counts() for host in FORMS[form]}
    applied: Counter[str] = sum(audits.values(), Counter())
    expected = {f"{sid}:{step}" for sid in run.sids for step in WRITE_STEPS}
    assert set(applied) == expected, f"{form}: writes missing {expected - set(applied)}"
    twice = {key: n for key, n in applied.items() if n != 1}
    assert not twice, f"{form}: writes applied more than once: {twice}"

    # No completed step ran again: one completed attempt per step, none dispatched after it.
    wait_for(
        lambda: all((row := record.session(s)) and row.status == "completed" for s in run.sids),
        30,
        "the SQL record of every end",
    )
    rows = [a for sid in run.sids for a in record.attempts(sid)]
    done = [a for a in rows if a.status == StepStatus.COMPLETED.value]
    per_step = Counter((a.session_id, a.step_id) for a in done)
    steps = len(run.sids) * len(STEP_IDS)
    assert len(per_step) == steps, f"{form}: {steps - len(per_step)} steps never completed"
    assert set(per_step.values()) == {1}, f"{form}: completed twice: {per_step.most_common(3)}"
    last = {(a.session_id, a.step_id): a.attempt for a in done}
    later = [
        (a.session_id, a.step_id, a.attempt)
        for a in rows
        if a.attempt > last[(a.session_id, a.step_id)]
    ]
    assert not later, f"{form}: attempts dispatched after their step completed: {later}"

    caught = [a for a in rows if (a.session_id, a.step_id) == cut.caught]
    assert max(a.attempt for a in caught) > 1, f"{form}: {cut.caught} ran once: {caught}"

    by_host = Counter(run.worker_host(a.worker) for a in done)
    assert set(by_host) == {"w1", "w2"}, f"{form}: steps completed by host {by_host}"
    back = [a for a in done if run.worker_host(a.worker) == "w1" and a.started_at > cut.restored_at]
    assert back, f"{form}: w1 ran nothing once its link was back"
    if form == "pools":
        wrong = []
        for a in done:
            host, toolset = run.worker_host(a.worker), TOOLS[a.step_id].partition(".")[0]
            if POOL_OF.get(toolset, host) != host:
                wrong.append((a.session_id, a.step_id, host))
        assert not wrong, f"steps completed on a host without their tool: {wrong}"
    return {
        "steps": steps,
        "attempts": len(rows),
        "reruns": len(rows) - steps,
        "by_host": dict(sorted(by_host.items())),
        "applied": sum(applied.values()),
        "keys": len(expected),
        "audit_lines": {host: sum(c.values()) for host, c in audits.items()},
    }


def fail_if_any_session_failed(run: Run, hot: HotState, when: str) -> None:
    """Fail at once, with its error, when a session has ended other than completed."""
    for sid in run.sids:
        session = hot.session(sid)
        if session.status.ended and session.status != SessionStatus.COMPLETED:
            pytest.fail(f"session {sid} ended {session.status} {when}: {session.error}")


def completed_steps(run: Run, hot: HotState) -> int:
    return sum(
        st.status == StepStatus.COMPLETED
        for sid in run.sids
        for st in hot.steps(sid, STEP_IDS).values()
    )


def live_worker_hosts(run: Run, hot: HotState) -> set[str]:
    """Hosts with a live worker heartbeat (on any queue: pools may give each its own)."""
    now = time.time()
    beats = read_heartbeats(hot.r, Keys(run.settings.key_prefix))
    return {run.worker_host(hb.worker) for hb in beats if hb.live(now)} - {""}
