"""Agent-step writes from the effect ledger's rows, and the compensations that undo them."""

from __future__ import annotations

import json
from dataclasses import dataclass

from planloop.core.tools import load_tools
from planloop.planner.plan import Step
from planloop.supervisor.session.agent_undo import agent_effects, effect_undos
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools)

TOOLS = load_tools()


@dataclass
class Row:
    idempotency_key: str
    step_id: str
    tool: str
    receipt: str | None
    created_at: float


def write_row(key: str, step: str, at: float, label: str = "x") -> Row:
    return Row(key, step, "bench.write", json.dumps({"receipt_id": "r", "label": label}), at)


def test_only_the_loop_writes_of_the_session_count_oldest_first() -> None:
    rows = [
        write_row("s1:agent:react:2", "agent", 2.0, "second"),
        write_row("s1:agent:react:1", "agent", 1.0, "first"),
        write_row("s1:w0", "w0", 0.5),  # a plan step's own write
        write_row("s1:agent:react:1:compensate:undo", "agent~compensate.react1", 3.0),
        write_row("s2:agent:react:1", "agent", 1.5),  # another session
        Row("s1:agent:react:3", "agent", "bench.write", None, 4.0),  # claimed, never made
    ]

    effects = agent_effects("s1", rows)

    assert [(e.step_id, e.turn, e.receipt["label"]) for e in effects] == [
        ("agent", 1, "first"),
        ("agent", 2, "second"),
    ]


def test_each_write_is_undone_by_its_tools_default_compensation() -> None:
    agent = Step(id="agent", tool="agent.react", instruction="x", params={"tools": ["bench.write"]})
    rows = [write_row("s1:agent:react:1", "agent", 1.0, "first")]
    rows.append(Row("s1:agent:react:2", "agent", "bench.echo", json.dumps({"value": 1}), 2.0))

    undos = effect_undos(TOOLS, [agent], agent_effects("s1", rows))

    (undo,) = undos  # bench.echo is no write: nothing to undo
    assert (undo.tool, undo.params, undo.turn, undo.key) == (
        "bench.undo_write",
        {"label": "first"},
        1,
        "agent:react:1",
    )
