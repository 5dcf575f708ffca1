"""The durable effect ledger on SQLite and PostgreSQL: the first receipt wins, racers apply an
effect once, and the receipt outlives the Redis that cached it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from planloop.core.effects import EFFECTS, EffectAudit, SqlEffectLedger
from planloop.core.errors import TransientToolError
from planloop.core.hot_state import RedisEffectCache, connect
from planloop.core.keys import Keys
from planloop.core.models import SessionStatus
from planloop.core.tools import ToolContext
from planloop.planner.plan import Plan
from tests.conftest import TEST_PG_URL, MakeRedis
from tests.integration.conftest import MakeStack
from tests.shipped import shipped

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


MakeLedger = Callable[..., SqlEffectLedger]


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'record.db'}" if request.param == "sqlite" else TEST_PG_URL


@pytest.fixture
def audit(tmp_path: Path) -> EffectAudit:
    return EffectAudit(tmp_path / "effects.jsonl")


@pytest.fixture
def ledger(database_url: str, audit: EffectAudit) -> Iterator[MakeLedger]:
    """A factory of ledgers on one database and one audit file (each its own engine)."""
    made: list[SqlEffectLedger] = []

    def make(**kwargs: Any) -> SqlEffectLedger:
        built = SqlEffectLedger(database_url, audit=audit, **kwargs)
        made.append(built)
        return built

    yield make
    for built in made:
        built.dispose()


@pytest.fixture
def key() -> str:
    """A key no other run of the suite uses (PostgreSQL's database is shared)."""
    return f"fx{uuid.uuid4().hex[:12]}:write"


def receipt_maker(n: int, calls: list[int] | None = None) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        if calls is not None:
            calls.append(n)
        return {"receipt_id": f"R-{n}", "n": n}

    return make


def test_the_first_receipt_wins_and_the_row_names_its_attempt(
    ledger: MakeLedger, audit: EffectAudit, key: str
) -> None:
    effects, calls = ledger(), []
    ctx = ToolContext(session_id="S", step_id="w", attempt=1, idempotency_key=key, tool="t.w")

    first = effects.apply_once(key, receipt_maker(1, calls), ctx)
    again = effects.apply_once(key, receipt_maker(2, calls))

    assert first == again == {"receipt_id": "R-1", "n": 1}
    assert calls == [1]
    assert effects.count(key) == audit.count(key) == 1
    with effects.engine.connect() as conn:
        row = conn.execute(select(EFFECTS).where(EFFECTS.c.idempotency_key == key)).one()
    assert (row.session_id, row.step_id, row.attempt, row.tool) == ("S", "w", 1, "t.w")
    assert json.loads(row.receipt) == first


def test_an_effect_that_raises_leaves_no_row_and_the_next_attempt_applies_it(
    ledger: MakeLedger, audit: EffectAudit, key: str
) -> None:
    effects = ledger()

    def fail() -> dict[str, Any]:
        raise TransientToolError("the outside system said 503")

    with pytest.raises(TransientToolError):
        effects.apply_once(key, fail)

    assert effects.receipt(key) is None
    assert effects.apply_once(key, receipt_maker(2)) == {"receipt_id": "R-2", "n": 2}
    assert audit.count(key) == 1


def test_racing_threads_apply_an_effect_once(
    ledger: MakeLedger, audit: EffectAudit, key: str
) -> None:
    """Eight attempts of one key at once (half sharing an engine, half on their own): one
    application, one receipt for all."""
    shared = ledger()
    ledgers = [shared] * 4 + [ledger() for _ in range(4)]
    for each in ledgers:
        assert each.receipt(key) is None  # engines and table ready before the race
    start = threading.Barrier(len(ledgers))
    calls: list[int] = []
    results: dict[int, dict[str, Any]] = {}

    def attempt(n: int) -> None:
        def slow_receipt() -> dict[str, Any]:
            time.sleep(0.05)  # the effect takes a while: the racers pile up on the claim
            return receipt_maker(n, calls)()

        start.wait(10)
        results[n] = ledgers[n].apply_once(key, slow_receipt)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(len(ledgers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(calls) == 1, calls
    assert len(results) == len(ledgers)
    assert all(r == results[calls[0]] for r in results.values()), results
    assert audit.duplicates() == {}
    assert audit.count(key) == 1


RACER = """
import json, sys, time
from pathlib import Path
from planloop.core.effects import EffectAudit, SqlEffectLedger

url, audit, go, keys = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:]
effects = SqlEffectLedger(url, audit=EffectAudit(audit))
effects.receipt(keys[0])  # engine and table ready before the race
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
pid = __import__("os").getpid()
out = {k: effects.apply_once(k, lambda k=k: {"key": k, "pid": pid}) for k in keys}
print(json.dumps(out), flush=True)
"""


def test_racing_processes_apply_each_effect_once(
    database_url: str, audit: EffectAudit, tmp_path: Path
) -> None:
    """Two worker-like processes run the same 30 keys at once: each applied once, and both
    processes got the same receipt for each key."""
    keys = [f"fx{uuid.uuid4().hex[:12]}:w{i}" for i in range(30)]
    go = tmp_path / "go"
    argv = [str(shipped().python), "-c", RACER, database_url, str(audit.path), str(go), *keys]
    racers = [
        subprocess.Popen(
            argv, cwd=shipped().home, env=shipped().env(), stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        go.touch()
        answers = [json.loads(racer.communicate(timeout=60)[0]) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
            racer.communicate()

    assert all(racer.returncode == 0 for racer in racers)
    assert answers[0] == answers[1]
    assert audit.duplicates() == {}
    assert set(audit.counts()) == set(keys)


def test_a_receipt_outlives_the_redis_that_cached_it(
    ledger: MakeLedger, audit: EffectAudit, key: str, private_redis: MakeRedis
) -> None:
    server = private_redis()
    client = connect(server.url)
    keys = Keys(f"fx{uuid.uuid4().hex[:6]}")
    cache = RedisEffectCache(client, keys)
    first = ledger(cache=cache).apply_once(key, receipt_maker(1))
    assert cache.get(key) == first

    server.restart(keep_data=False)  # a brand-new, empty Redis on the same address
    assert cache.get(key) is None
    again = ledger(cache=cache).apply_once(key, receipt_maker(2))

    assert again == first
    assert audit.count(key) == 1
    assert cache.get(key) == first, "the cache is filled again from SQL"
    client.close()


def test_an_unreachable_cache_costs_a_sql_read_not_the_effect(
    ledger: MakeLedger, audit: EffectAudit, key: str, private_redis: MakeRedis
) -> None:
    server = private_redis()
    client = connect(server.url)
    effects = ledger(cache=RedisEffectCache(client, Keys("fx")))
    first = effects.apply_once(key, receipt_maker(1))
    server.stop()

    assert effects.apply_once(key, receipt_maker(2)) == first
    assert audit.count(key) == 1
    client.close()


@pytest.mark.postgres
def test_a_receipt_whose_connection_dies_before_the_commit_is_recorded_again(
    audit: EffectAudit, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL drops the connection right after the effect: no second application, and
    the receipt is recorded on a new connection."""
    name = f"fx{uuid.uuid4().hex[:10]}"
    effects = SqlEffectLedger(f"{TEST_PG_URL}?application_name={name}", audit=audit)
    effects.receipt(key)
    killer = SqlEffectLedger(TEST_PG_URL)

    def effect_then_connection_lost() -> dict[str, Any]:
        with killer.engine.connect() as conn:
            killed = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = :name AND state = 'idle in transaction'"
                ),
                {"name": name},
            ).scalar_one()
        assert killed == 1
        return {"receipt_id": "R-1"}

    try:
        first = effects.apply_once(key, effect_then_connection_lost)

        assert first == {"receipt_id": "R-1"}
        assert effects.receipt(key) == first
        assert effects.apply_once(key, receipt_maker(2)) == first
        assert audit.count(key) == 1
        assert "receipt not committed: recording it again" in caplog.text
    finally:
        effects.dispose()
        killer.dispose()


def test_prefork_workers_record_effects_in_sql(private_stack: MakeStack) -> None:
    """Each forked worker process builds its own engine on first use and records there."""
    ps = private_stack(workers=0, supervisors=1, worker_pool="prefork")
    ps.workers.append(ps.stack.start_worker(2, pool="prefork"))
    steps = [
        {"id": f"w{i}", "tool": "bench.write", "params": {"label": f"w{i}", "seconds": 0.2}}
        for i in range(6)
    ]
    plan = Plan.model_validate({"goal": "prefork writes", "steps": steps})
    sid = ps.producer.submit(plan)

    record = ps.finish(sid, [s["id"] for s in steps])

    assert record.status == SessionStatus.COMPLETED, record.error
    keys = {f"{sid}:{s['id']}" for s in steps}
    assert all(ps.effects.receipt(k) is not None for k in keys)
    audit = ps.effects.audit
    assert audit is not None
    assert audit.duplicates() == {}
    assert set(audit.counts()) == keys
    lines = [json.loads(line) for line in audit.path.read_text().splitlines()]
    main_pid = ps.workers[0].pid
    assert main_pid not in {line["pid"] for line in lines}, "effects applied in the parent"
