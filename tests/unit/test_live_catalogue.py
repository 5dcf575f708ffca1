"""Plan validation from the published tool catalogue: a tool whose module is not importable
here is checked against the JSON schema its worker published, and live wins over local."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from planloop.core.catalogue import CatalogueEntry, catalogue_entry
from planloop.core.errors import PermanentToolError, PlanValidationError
from planloop.core.heartbeat import Heartbeat
from planloop.core.live_tools import LOCAL_NOTE, CatalogueSource, LiveTools, Snapshot
from planloop.core.published_tools import PublishedToolSpec, published_spec
from planloop.core.tools import ToolContext, ToolRegistry, ToolSpec
from planloop.planner.plan import Plan, Step
from planloop.planner.prompting import tool_catalogue
from planloop.planner.validation import params_problem, validate_plan


class GreetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    times: int = Field(1, ge=1)
    style: str = "plain"


class LocalGreetParams(BaseModel):  # an older local copy of the tool: other params
    who: str


def _noop(params: Any, ctx: ToolContext) -> dict[str, Any]:
    return {}


GREET = ToolSpec("acme.greet", "Greets someone.", GreetParams, None, _noop, timeout_s=7.0)


def entry(spec: ToolSpec, worker: str = "w1@host", at: float | None = None) -> CatalogueEntry:
    return catalogue_entry(spec, worker, time.time() if at is None else at)


def heartbeat(worker: str, *tools: str, queue: str = "planloop") -> Heartbeat:
    now = time.time()
    return Heartbeat(
        worker=worker, queue=queue, tools=list(tools), seen_at=now, expires_at=now + 60
    )


def greet_plan(**params: Any) -> Plan:
    return Plan(steps=[Step(id="hello", tool="acme.greet", params=params)])


def published() -> ToolRegistry:
    """What a producer without acme's code knows: the published entry only."""
    return ToolRegistry([published_spec(entry(GREET))])


def test_a_published_tool_validates_without_its_module() -> None:
    validate_plan(greet_plan(name="Ada", times=2), published())
    spec = published().get("acme.greet")
    assert isinstance(spec, PublishedToolSpec)
    assert spec.timeout_s == 7.0  # the supervisor's step timeout still knows it


def test_an_unknown_tool_is_named_against_the_published_catalogue() -> None:
    plan = Plan(steps=[Step(id="hello", tool="acme.greeet", params={"name": "Ada"})])
    with pytest.raises(PlanValidationError, match=r"unknown tool 'acme.greeet'.*'acme.greet'"):
        validate_plan(plan, published())


@pytest.mark.parametrize(
    ("params", "culprit"),
    [
        ({"name": 3}, r"param 'name': should be of type 'string'"),
        ({"name": "Ada", "times": 0}, r"param 'times': breaks the schema's 'minimum': 1"),
        ({}, r"param 'name': Field required"),
        ({"name": "Ada", "loud": True}, r"param 'loud': unknown param for tool 'acme.greet'"),
    ],
)
def test_params_that_do_not_fit_the_published_schema_name_the_param(
    params: dict[str, Any], culprit: str
) -> None:
    with pytest.raises(PlanValidationError, match=culprit) as caught:
        validate_plan(greet_plan(**params), published())
    assert caught.value.step_id == "hello"


def test_a_schema_error_never_repeats_the_value() -> None:
    problem = params_problem({"name": ["s3cret-value"]}, published().get("acme.greet"))
    assert problem is not None
    assert "s3cret" not in problem


def test_a_referenced_param_is_only_checked_to_exist() -> None:
    spec = published().get("acme.greet")
    assert params_problem({"name": "Ada", "times": "{{count.output.n}}"}, spec) is None
    assert params_problem({"name": "Ada", "tiems": "{{count.output.n}}"}, spec) is not None


def test_local_and_published_specs_agree_on_what_fits() -> None:
    local = ToolRegistry([GREET])
    for params in ({"name": "Ada"}, {"name": 3}, {}, {"name": "Ada", "x": 1}, {"times": 2}):
        assert (params_problem(params, GREET) is None) == (
            params_problem(params, published().get("acme.greet")) is None
        ), params
    assert local.get("acme.greet").param_names() == published().get("acme.greet").param_names()


def test_a_published_tool_cannot_run_here() -> None:
    ctx = ToolContext("s", "hello", 1, "s:hello")
    with pytest.raises(PermanentToolError, match="known here only from the catalogue"):
        published().get("acme.greet").run({"name": "Ada"}, ctx)


def test_the_prompt_shows_a_published_tool_as_the_local_one() -> None:
    assert tool_catalogue(published()) == tool_catalogue(ToolRegistry([GREET]))
    assert tool_catalogue(published(), compact=True) == tool_catalogue(
        ToolRegistry([GREET]), compact=True
    )


# --- LiveTools: live over local, the local fallback ------------------------------------------
LOCAL_GREET = ToolSpec("acme.greet", "Old greeting.", LocalGreetParams, None, _noop)


class NoParams(BaseModel):
    pass


LOCAL_ONLY = ToolSpec("shop.noop", "Nothing.", NoParams, None, _noop)


def live_view(snapshot: Snapshot, notes: list[str] | None = None) -> LiveTools:
    seen = notes if notes is not None else []
    return LiveTools(
        ToolRegistry([LOCAL_GREET, LOCAL_ONLY]), lambda: snapshot, on_local=seen.append
    )


def test_live_wins_over_local_where_both_know_a_tool() -> None:
    snapshot = Snapshot([heartbeat("w1@host", "acme.greet")], {"acme.greet": entry(GREET)})
    tools = live_view(snapshot)
    assert tools.source is CatalogueSource.LIVE
    validate_plan(greet_plan(name="Ada"), tools)  # the published params, not the local `who`
    with pytest.raises(PlanValidationError, match="param 'who': unknown param"):
        validate_plan(greet_plan(who="Ada"), tools)
    assert tools.get("acme.greet").description == "Greets someone."


def test_the_planner_sees_only_what_live_workers_serve() -> None:
    snapshot = Snapshot([heartbeat("w1@host", "acme.greet")], {"acme.greet": entry(GREET)})
    tools = live_view(snapshot)
    assert tools.names() == ["acme.greet"]
    assert "shop.noop" not in tool_catalogue(tools)
    # ... while a plan may still name a local tool no worker serves yet (--no-worker-check)
    validate_plan(Plan(steps=[Step(id="n", tool="shop.noop")]), tools)


def test_a_stale_entry_is_known_but_not_listed_and_local_wins_over_it() -> None:
    gone = ToolSpec("acme.gone", "Nobody serves me.", GreetParams, None, _noop)
    entries = {"acme.greet": entry(GREET), "acme.gone": entry(gone, "w0@host", at=0.0)}
    tools = live_view(Snapshot([heartbeat("w1@host", "acme.greet")], entries))
    assert "acme.gone" in tools
    assert tools.names() == ["acme.greet"]


def test_no_live_worker_falls_back_to_the_local_catalogue_and_says_so_once() -> None:
    notes: list[str] = []
    tools = live_view(Snapshot([], {"acme.greet": entry(GREET)}), notes)
    assert tools.source is CatalogueSource.LOCAL
    assert tools.names() == ["acme.greet", "shop.noop"]
    validate_plan(greet_plan(who="Ada"), tools)  # the local contract
    tools.refresh()
    assert notes == [LOCAL_NOTE]


def test_an_unreadable_catalogue_keeps_the_last_one_read() -> None:
    import redis

    snapshots = [Snapshot([heartbeat("w1@host", "acme.greet")], {"acme.greet": entry(GREET)})]

    def read() -> Snapshot:
        if not snapshots:
            raise redis.ConnectionError("down")
        return snapshots.pop()

    tools = LiveTools(ToolRegistry([LOCAL_ONLY]), read)
    assert tools.names() == ["acme.greet"]
    tools.refresh()
    assert tools.source is CatalogueSource.LIVE
    assert tools.names() == ["acme.greet"]


# --- planloop tools --------------------------------------------------------------------------
def test_the_tools_view_lists_each_worker_with_its_queues(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from planloop.producer.tool_views import catalogue_doc, print_catalogue

    snapshot = Snapshot(
        [heartbeat("w1@host", "acme.greet", queue="acme"), heartbeat("w2@host", "acme.greet")],
        {"acme.greet": entry(GREET)},
    )
    tools = live_view(snapshot)
    doc = catalogue_doc(tools)
    assert doc["source"] == "live"
    assert [(w["worker"], w["queues"], w["tools"]) for w in doc["workers"]] == [
        ("w1@host", ["acme"], ["acme.greet"]),
        ("w2@host", ["planloop"], ["acme.greet"]),
    ]
    print_catalogue(tools)
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["w1@host", "acme", "acme.greet"], ["w2@host", "planloop", "acme.greet"]]


def test_the_tools_view_shows_the_queues_a_heartbeat_names() -> None:
    from planloop.producer.tool_views import catalogue_doc

    now = time.time()
    pooled = Heartbeat(
        worker="w", queue="planloop", queues=["acme", "bench"], seen_at=now, expires_at=now + 60
    )
    pooled = pooled.model_copy(update={"tools": ["acme.greet"]})
    older = heartbeat("v", "acme.greet")  # a worker that names no queues: its base queue
    assert pooled.consumed() == ["acme", "bench"]
    assert older.consumed() == ["planloop"]
    tools = live_view(Snapshot([pooled, older], {"acme.greet": entry(GREET)}))
    shown = {w["worker"]: w["queues"] for w in catalogue_doc(tools)["workers"]}
    assert shown == {"w": ["acme", "bench"], "v": ["planloop"]}


def test_the_tools_view_says_when_it_shows_the_local_catalogue(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from planloop.producer.tool_views import catalogue_doc, print_catalogue

    tools = live_view(Snapshot())
    assert catalogue_doc(tools)["source"] == "local"
    print_catalogue(tools)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{LOCAL_NOTE}:"
    assert [line.split()[2] for line in out[2:]] == ["acme.greet", "shop.noop"]


def test_a_tool_known_locally_is_known_while_other_workers_are_live() -> None:
    snapshot = Snapshot([heartbeat("w1@host", "acme.greet")], {"acme.greet": entry(GREET)})
    tools = live_view(snapshot)
    assert tools.names() == ["acme.greet"]
    assert tools.known_names() == ["acme.greet", "shop.noop"]


def test_a_producer_view_raises_the_fault_its_next_redis_call_would_meet() -> None:
    import redis

    def read() -> Snapshot:
        raise redis.ConnectionError("down")

    tools = LiveTools(ToolRegistry([LOCAL_ONLY]), read, keep_last_on_fault=False)
    with pytest.raises(redis.ConnectionError):
        tools.names()
