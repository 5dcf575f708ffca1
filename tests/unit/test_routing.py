"""The routing decision (core/routing.py): pool queues, live pools, and which queue a step
goes to, or None (wait)."""

from __future__ import annotations

import pytest

from planloop.config.settings import Settings
from planloop.core.errors import PlanLoadError
from planloop.core.heartbeat import Heartbeat
from planloop.core.routing import Pool, live_pools, pool_queue, route_step, worker_queues
from planloop.planner.plan import Step, parse_plan
from planloop.supervisor.io.step_queue import step_needs

NOW = 1_000.0
BENCH = ["bench.echo", "bench.sleep"]
ACME = ["acme.greet"]


def beat(
    worker: str, tools: list[str], *, queues: list[str] | None = None, **kw: object
) -> Heartbeat:
    base = str(kw.pop("queue", "planloop"))
    return Heartbeat(
        worker=worker,
        queue=base,
        queues=queues if queues is not None else worker_queues(base, tools),
        tools=tools,
        seen_at=NOW - 1,
        expires_at=float(kw.pop("expires_at", NOW + 10)),  # type: ignore[arg-type]
    )


def route(
    tool: str,
    pools: list[Pool],
    *,
    step_queue: str | None = None,
    tool_queues: dict[str, str] | None = None,
    needs: list[str] | None = None,
    key: str = "s",
) -> str | None:
    return route_step(
        [tool] if needs is None else needs,
        tool=tool,
        step_queue=step_queue,
        tool_queues=tool_queues or {},
        pools=pools,
        key=key,
    )


def test_a_pool_queue_is_named_by_toolsets_and_exact_for_the_tool_set() -> None:
    q = pool_queue("planloop", ["ecommerce.inventory", "bench.echo"])
    assert q.startswith("planloop.bench+ecommerce.")
    assert q == pool_queue("planloop", ["bench.echo", "ecommerce.inventory", "bench.echo"])
    # Same prefix, other tools: another queue (a per-prefix queue would mix them).
    assert pool_queue("planloop", ["acme.greet"]) != pool_queue("planloop", ["acme.other"])
    many = pool_queue("p", ["a.x", "b.x", "c.x", "d.x", "e.x"])
    assert many.startswith("p.a+b+c+2more.")
    assert worker_queues("p", ["a.x"], ["gpu", "gpu"]) == [pool_queue("p", ["a.x"]), "gpu"]


def test_live_pools_keep_what_every_live_consumer_serves() -> None:
    pools = live_pools(
        [
            beat("w1", BENCH),
            beat("w2", BENCH),  # same tools: the same pool
            beat("w3", ACME, queues=[pool_queue("planloop", ACME), "shared"]),
            beat("w4", BENCH, queues=[pool_queue("planloop", BENCH), "shared"]),
            beat("dead", ["dead.tool"], expires_at=NOW - 1),
            beat("other", ["x.y"], queue="elsewhere"),
            Heartbeat(worker="old", queue="planloop", tools=BENCH, seen_at=NOW, expires_at=NOW + 9),
        ],
        "planloop",
        NOW,
    )
    by_queue = {p.queue: p for p in pools}
    assert set(by_queue) == {
        pool_queue("planloop", BENCH),
        pool_queue("planloop", ACME),
        "shared",
        "planloop",  # an older worker's heartbeat names no queues: the base queue
    }
    assert by_queue[pool_queue("planloop", BENCH)].workers == ("w1", "w2", "w4")
    assert by_queue["shared"].tools == frozenset()  # no tool both of its consumers serve


def test_a_step_goes_to_a_pool_whose_workers_all_serve_its_tool() -> None:
    pools = live_pools([beat("b", BENCH), beat("a", ACME)], "planloop", NOW)
    assert route("acme.greet", pools) == pool_queue("planloop", ACME)
    assert route("bench.echo", pools) == pool_queue("planloop", BENCH)
    # A queue consumed by a worker without the tool is never chosen.
    mixed = live_pools(
        [beat("a", ACME, queues=["shared"]), beat("b", BENCH, queues=["shared"])],
        "planloop",
        NOW,
    )
    assert route("acme.greet", mixed) is None


def test_no_live_worker_serves_it_means_wait() -> None:
    assert route("acme.greet", []) is None
    pools = live_pools([beat("b", BENCH), beat("a", ACME, expires_at=NOW - 1)], "planloop", NOW)
    assert route("acme.greet", pools) is None
    assert route("agent.answer", [], needs=[]) is None  # no live worker at all


def test_explicit_routing_wins_whether_or_not_anyone_consumes() -> None:
    pools = live_pools([beat("b", BENCH)], "planloop", NOW)
    assert route("bench.echo", pools, step_queue="gpu") == "gpu"
    assert route("acme.greet", [], tool_queues={"acme.greet": "acme"}) == "acme"
    # the step's own queue: beats the setting
    assert route("acme.greet", [], step_queue="mine", tool_queues={"acme.greet": "x"}) == "mine"


def test_steps_share_pools_that_all_serve_them_by_their_key() -> None:
    both = ["bench.echo", "acme.greet"]
    pools = live_pools([beat("b", BENCH), beat("ab", both)], "planloop", NOW)
    chosen = {route("bench.echo", pools, key=f"step{i}") for i in range(40)}
    assert chosen == {pool_queue("planloop", BENCH), pool_queue("planloop", both)}
    assert route("bench.echo", pools, key="k") == route("bench.echo", pools, key="k")


def test_what_a_step_needs() -> None:
    assert step_needs(Step(id="a", tool="bench.echo")) == ["bench.echo"]
    react = Step(id="r", tool="agent.react", params={"tools": ["acme.greet", "bench.echo"]})
    assert step_needs(react) == ["acme.greet", "bench.echo"]
    assert step_needs(Step(id="q", tool="agent.answer")) == []


def test_a_plan_step_may_name_its_queue() -> None:
    plan = parse_plan("steps: [{id: a, tool: bench.echo, queue: gpu.pool-1}]")
    assert plan.step("a").queue == "gpu.pool-1"
    with pytest.raises(PlanLoadError, match="queue"):
        parse_plan("steps: [{id: a, tool: bench.echo, queue: 'has spaces'}]")


def test_routing_settings_parse_as_a_person_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANLOOP_WORKER_QUEUES", "gpu, cpu")
    monkeypatch.setenv("PLANLOOP_TOOL_QUEUES", '{"acme.greet": "gpu"}')
    settings = Settings()
    assert settings.worker_queues == ["gpu", "cpu"]
    assert settings.tool_queues == {"acme.greet": "gpu"}
    monkeypatch.setenv("PLANLOOP_WORKER_QUEUES", '["a"]')
    assert Settings().worker_queues == ["a"]


def test_the_plan_json_schema_documents_a_steps_queue() -> None:
    from planloop.planner.plan import Plan

    queue = Plan.model_json_schema()["$defs"]["Step"]["properties"]["queue"]
    assert "assignedWorker" in queue["description"]
    assert any(option.get("pattern") for option in queue["anyOf"])


def test_status_names_each_tool_steps_wait_for_until_it_is_served() -> None:
    from planloop.producer.views import unserved_warnings

    notes = [
        {"kind": "unserved", "tool": "acme.greet", "step": "hi", "wait_s": "60", "at": "1"},
        {"kind": "unserved", "tool": "acme.wave", "step": "yo", "wait_s": "60", "at": "2"},
        {"kind": "served", "tool": "acme.wave", "at": "3"},
    ]
    (line,) = unserved_warnings(notes)
    assert line.startswith("no live worker serves acme.greet: step hi waits up to 60 s")
    assert unserved_warnings([*notes, {"kind": "unserved_failed", "tool": "acme.greet"}]) == []
