"""Pure parts of operability: the tool-modules list, the tools a plan needs, JSON log
lines, and the unreachable-service line."""

from __future__ import annotations

import json
import logging

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.heartbeat import Heartbeat
from planloop.core.logs import JsonFormatter, bound
from planloop.planner.plan import parse_plan
from planloop.producer.exits import unreachable
from planloop.producer.liveness import required_tools, unserved


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("acme_tools", ["acme_tools"]),
        ("acme.tools, acme.more ,", ["acme.tools", "acme.more"]),
        ('["acme.tools", "acme.more"]', ["acme.tools", "acme.more"]),
        ("", []),
    ],
)
def test_tool_modules_takes_a_comma_list_or_a_json_list(
    raw: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANLOOP_TOOL_MODULES", raw)
    assert Settings().tool_modules == expected


def test_to_env_round_trips_tool_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    env = Settings(tool_modules=["a.b", "c"]).to_env()
    monkeypatch.setenv("PLANLOOP_TOOL_MODULES", env["PLANLOOP_TOOL_MODULES"])
    assert Settings().tool_modules == ["a.b", "c"]


def test_required_tools_cover_fallbacks_compensations_and_agent_tools() -> None:
    plan = parse_plan(
        """
steps:
  - id: a
    tool: bench.echo
    params: {value: 1}
    compensate: {tool: bench.undo_write, params: {}}
    fallback:
      - {id: fb, tool: ecommerce.reviews, params: {product_id: x}}
  - id: r
    tool: agent.react
    instruction: find out
    params: {tools: [ecommerce.inventory]}
"""
    )
    assert required_tools(plan) == [
        "bench.echo",
        "bench.undo_write",
        "ecommerce.inventory",
        "ecommerce.reviews",
    ]


def test_unserved_names_what_no_worker_serves() -> None:
    a = Heartbeat(worker="a", queue="q", tools=["x.one"], seen_at=0, expires_at=1)
    b = Heartbeat(worker="b", queue="q", tools=["y.two", "y.three"], seen_at=0, expires_at=1)
    assert unserved(["x.one", "y.two", "z.four"], [a, b]) == ["z.four"]
    assert b.toolsets() == ["y"]
    assert not a.live(now=1.0)


def test_json_log_lines_carry_session_and_step() -> None:
    formatter = JsonFormatter()

    def line(msg: str, *args: object, **extra: object) -> dict[str, object]:
        record = logging.LogRecord("planloop.x", logging.INFO, __file__, 1, msg, args, None)
        for key, value in extra.items():
            setattr(record, key, value)
        return dict(json.loads(formatter.format(record)))

    worded = line("session=%s step=%s attempt=%d completed", "s1", "fetch", 2)
    assert (worded["session_id"], worded["step_id"], worded["attempt"]) == ("s1", "fetch", 2)
    assert worded["level"] == "INFO"
    assert worded["logger"] == "planloop.x"
    with bound("s2", "store"):
        from_context = line("nothing named here")
    assert (from_context["session_id"], from_context["step_id"]) == ("s2", "store")
    assert "session_id" not in line("about no session")
    assert line("x", session_id="s3")["session_id"] == "s3"


def test_unreachable_names_the_service_and_masks_the_password() -> None:
    found = unreachable(
        redis.ConnectionError("Error 111 connecting to h:1. Connection refused."),
        "redis://:pw@h:1/0",
        "sqlite:///x.db",
    )
    assert found is not None
    assert found.message() == (
        "cannot reach Redis at redis://:***@h:1/0 (Error 111 connecting to h:1. Connection "
        "refused.): start it, or point PLANLOOP_REDIS_URL at one that runs"
    )
    assert unreachable(ValueError("no"), "redis://h", "sqlite://") is None


def test_a_goal_needs_a_tool_of_each_toolset_or_any_tool() -> None:
    from planloop.producer.liveness import goal_tools

    a = Heartbeat(worker="a", queue="q", tools=["bench.echo"], seen_at=0, expires_at=1)
    assert unserved(goal_tools(["bench", "ecommerce"]), [a]) == ["ecommerce.*"]
    assert unserved(goal_tools([]), [a]) == []
    assert unserved(goal_tools([]), []) == ["*"]
