"""Agent steps: the ReAct loop with a scripted chat model, their validation, and routing a
goal (router, planner fallback). Pure logic: no Redis, no HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from planloop.core.errors import AgentStepExhausted, LLMResponseError, LLMUnavailableError
from planloop.core.tools import load_tools
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan, Step
from planloop.planner.react import (
    Iteration,
    Observation,
    ReactAgent,
    ReactStopped,
    ReactTask,
    ReactTurn,
    usage_payload,
    usages_of,
)
from planloop.planner.react_step import REACT_TOOL
from planloop.planner.routing import AGENT_STEP_ID
from planloop.planner.validation import all_errors, validate_plan
from planloop.supervisor.session.goal_routing import first_plan, route_goal

T = TypeVar("T", bound=BaseModel)
TOOLS = load_tools()


class ScriptedChat:
    """Answers each call with the next scripted reply (a dict, or an exception to raise)."""

    def __init__(self, *replies: dict[str, Any] | Exception) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[Role, list[dict[str, str]]]] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        self.calls.append((role, [dict(m) for m in messages]))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return schema.model_validate(reply), Usage(100, 10, 0.0, "m-react", str(role))


def task(max_iterations: int = 6, tools: tuple[str, ...] = ("ecommerce.inventory",)) -> ReactTask:
    return ReactTask(
        step_id="agent",
        instruction="Is SKU1 in stock, and how does it sell?",
        tools=[TOOLS.get(name) for name in tools],
        max_iterations=max_iterations,
        context={"sku": "SKU1"},
    )


def recorder() -> tuple[list[tuple[int, str, dict[str, Any]]], Callable[..., Observation]]:
    calls: list[tuple[int, str, dict[str, Any]]] = []

    def call_tool(turn: int, tool: str, params: dict[str, Any]) -> Observation:
        calls.append((turn, tool, params))
        return Observation(True, {"tool": tool, "turn": turn})

    return calls, call_tool


# --- the loop -----------------------------------------------------------------------------
def test_two_tool_calls_then_an_answer() -> None:
    chat = ScriptedChat(
        {"thought": "stock first", "tool": "ecommerce.inventory", "params": {"product_id": "S"}},
        {"thought": "now sales", "tool": "ecommerce.order_stats", "params": {"product_id": "S"}},
        {"thought": "done", "final_answer": {"in_stock": True, "advice": "reorder"}},
    )
    calls, call_tool = recorder()
    seen: list[Iteration] = []
    two_tools = ("ecommerce.inventory", "ecommerce.order_stats")

    result = ReactAgent(chat).run(task(tools=two_tools), call_tool, on_iteration=seen.append)

    assert result.answer == {"in_stock": True, "advice": "reorder"}
    assert calls == [
        (1, "ecommerce.inventory", {"product_id": "S"}),
        (2, "ecommerce.order_stats", {"product_id": "S"}),
    ]
    assert [(it.number, it.tool) for it in seen] == [
        (1, "ecommerce.inventory"),
        (2, "ecommerce.order_stats"),
        (3, None),
    ]
    roles = {role for role, _ in chat.calls}
    assert roles == {Role.REACT}
    first = chat.calls[0][1]
    assert first[0]["content"].splitlines()[0] == "ROLE: react"
    assert "### ecommerce.order_stats" in first[0]["content"] + first[1]["content"]
    assert '"sku": "SKU1"' in first[1]["content"]  # the context reaches the model
    third = chat.calls[2][1]  # the observations went back to the model, in order
    assert '{"tool": "ecommerce.inventory", "turn": 1}' in third[-3]["content"]
    assert '{"tool": "ecommerce.order_stats", "turn": 2}' in third[-1]["content"]
    output = result.output()
    assert output["answer"] == result.answer
    assert output["iterations"] == 3
    assert [c["tool"] for c in output["tool_calls"]] == list(two_tools)
    assert sum(u["prompt_tokens"] for u in output["llm_usage"]) == 300


def test_a_tool_outside_the_allowed_set_is_refused_as_an_observation() -> None:
    chat = ScriptedChat(
        {"tool": "supply_chain.reserve_stock", "params": {"sku": "S", "qty": 1}},
        {"final_answer": {"ok": False}},
    )
    calls, call_tool = recorder()

    result = ReactAgent(chat).run(task(), call_tool)

    assert calls == []  # never run
    assert result.answer == {"ok": False}
    refusal = chat.calls[1][1][-1]["content"]
    assert "'supply_chain.reserve_stock' is not allowed here" in refusal
    assert "ecommerce.inventory" in refusal


def test_no_answer_within_the_turn_budget_stops_with_the_turns_spent() -> None:
    turn = {"tool": "ecommerce.inventory", "params": {"product_id": "S"}}
    chat = ScriptedChat(turn, turn, turn)
    calls, call_tool = recorder()

    with pytest.raises(ReactStopped) as stopped:
        ReactAgent(chat).run(task(max_iterations=3), call_tool)

    assert isinstance(stopped.value.cause, AgentStepExhausted)
    assert "within 3 turn(s)" in str(stopped.value.cause)
    assert len(calls) == 2  # the last turn's call is not run
    assert len(stopped.value.iterations) == 3  # every turn's tokens are still accounted
    assert "last turn" in chat.calls[2][1][-1]["content"]


def test_a_model_failure_stops_the_loop_with_the_turns_before_it() -> None:
    chat = ScriptedChat(
        {"tool": "ecommerce.inventory", "params": {"product_id": "S"}},
        LLMUnavailableError("down", base_url="http://x", status=503),
    )
    _, call_tool = recorder()

    with pytest.raises(ReactStopped) as stopped:
        ReactAgent(chat).run(task(), call_tool)

    assert isinstance(stopped.value.cause, LLMUnavailableError)
    assert [it.number for it in stopped.value.iterations] == [1]


def test_a_turn_is_a_tool_call_or_an_answer_never_both_or_neither() -> None:
    assert ReactTurn.model_validate({"tool": "t", "params": {}}).tool == "t"
    assert ReactTurn.model_validate({"final_answer": {"a": 1}}).final_answer == {"a": 1}
    for bad in ({"thought": "hm"}, {"tool": "t", "final_answer": {"a": 1}}):
        with pytest.raises(ValueError, match="either"):
            ReactTurn.model_validate(bad)


def test_usage_rows_read_back() -> None:
    usages = [Usage(5, 6, 0.5, "m", "react"), Usage(1, 2, 0.1, "n", "react")]
    rows = json.loads(json.dumps(usage_payload(usages)))
    assert usages_of(rows) == usages
    assert usages_of(None) == []
    assert usages_of([{"model": "m"}]) == []  # unreadable rows are skipped


def test_an_observation_is_cut_for_the_model() -> None:
    assert Observation(True, {"a": "x" * 10}).text(limit=8) == '{"a":...'
    assert Observation(False, error="boom").text() == "error: boom"


# --- validation ---------------------------------------------------------------------------
def agent_step(**changes: Any) -> Step:
    data: dict[str, Any] = {
        "id": "research",
        "tool": REACT_TOOL,
        "instruction": "Find out why SKU1 sells less",
        "params": {"tools": ["ecommerce.reviews", "ecommerce.competitors"]},
    }
    data.update(changes)
    return Step.model_validate(data)


def test_an_agent_step_validates_and_may_reference_its_dependencies() -> None:
    orders = Step(id="orders", tool="ecommerce.order_stats", params={"product_id": "SKU1"})
    research = agent_step(
        params={
            "tools": ["ecommerce.reviews"],
            "max_iterations": 4,
            "context": {"sold": "{{orders.output.units_sold}}"},
        },
        dependencies=["orders"],
    )
    validate_plan(Plan(steps=[orders, research]), TOOLS)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"instruction": " "}, "needs an 'instruction'"),
        ({"params": {"tools": ["ecommerce.nope"]}}, "unknown tool 'ecommerce.nope'"),
        ({"params": {"tools": [REACT_TOOL]}}, "cannot call agent.react itself"),
        ({"params": {"tools": []}}, "param 'tools'"),
        ({"params": {"tools": ["ecommerce.reviews"], "max_iterations": 0}}, "max_iterations"),
        ({"params": {"tools": ["ecommerce.reviews"], "loops": 2}}, "param 'loops'"),
    ],
)
def test_a_bad_agent_step_is_refused_naming_it(changes: dict[str, Any], message: str) -> None:
    errors = all_errors(Plan(steps=[agent_step(**changes)]), TOOLS)
    assert len(errors) == 1
    assert "step 'research'" in str(errors[0])
    assert message in str(errors[0])


# --- routing ------------------------------------------------------------------------------
def test_auto_asks_the_router_and_react_gives_one_agent_step() -> None:
    chat = ScriptedChat({"mode": "react", "reasoning": "open-ended"})
    route = route_goal(chat, TOOLS, "investigate the returns", "auto")
    assert (route.mode, route.reason) == ("react", "router: open-ended")
    assert chat.calls[0][0] == Role.ROUTER
    assert chat.calls[0][1][0]["content"].startswith("ROLE: router\n")
    assert len(route.usages) == 1

    first = first_plan(
        chat, TOOLS, "investigate the returns", ["be quick"], mode="react", max_repairs=1
    )
    (step,) = first.plan.steps
    assert (step.id, step.tool, step.critical) == (AGENT_STEP_ID, REACT_TOOL, True)
    assert step.instruction.startswith("investigate the returns")
    assert "- be quick" in step.instruction
    assert step.params["tools"] == TOOLS.names()
    validate_plan(first.plan, TOOLS)


def test_the_router_may_find_that_no_tool_is_needed() -> None:
    chat = ScriptedChat({"mode": "answer", "reasoning": "general knowledge"})
    route = route_goal(chat, TOOLS, "what is the capital of France?", "auto")
    assert (route.mode, route.reason) == ("answer", "router: general knowledge")
    assert '"answer"' in chat.calls[0][1][0]["content"]  # the prompt offers the choice


def test_a_chosen_mode_skips_the_router_and_a_failing_router_means_plan() -> None:
    silent = ScriptedChat()
    assert route_goal(silent, TOOLS, "g", "react").mode == "react"
    assert silent.calls == []
    broken = ScriptedChat(LLMResponseError("garbage", raw="?", role="router"))
    assert route_goal(broken, TOOLS, "g", "auto").mode == "plan"


def test_a_planner_that_keeps_failing_gives_way_to_one_agent_step() -> None:
    chat = ScriptedChat(LLMResponseError("still garbage", raw="?", role="planner"))
    first = first_plan(chat, TOOLS, "advise on SKU1", [], mode="plan", max_repairs=2)
    assert first.fallback_error == "still garbage"
    assert [s.tool for s in first.plan.steps] == [REACT_TOOL]


def test_an_unreachable_endpoint_still_fails_planning() -> None:
    chat = ScriptedChat(LLMUnavailableError("down", base_url="http://x", status=None))
    with pytest.raises(LLMUnavailableError):
        first_plan(chat, TOOLS, "advise on SKU1", [], mode="plan", max_repairs=2)
