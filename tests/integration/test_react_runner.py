"""An agent step's tool calls go through the step machinery: the params model, the tool's
circuit breaker (real Redis, shared with every worker), the step's deadline, the effect
ledger; and every turn is streamed as progress. The runner is driven directly (no Celery),
with a scripted chat model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.errors import AgentStepStalled, ToolTimeoutError
from planloop.core.hot_state import BreakerPolicy, HotState
from planloop.core.keys import Keys
from planloop.core.models import SessionOptions, StepTaskArgs
from planloop.core.tools import MemoryEffectLedger, load_tools
from planloop.planner.react import ReactStopped
from planloop.planner.react_step import REACT_TOOL
from planloop.workers.react import AgentStepRunner
from planloop.workers.tool_threads import ToolThreads
from tests.integration.conftest import _delete_prefix
from tests.unit.test_react import ScriptedChat

pytestmark = pytest.mark.integration

SID = "react-runner"


@pytest.fixture
def hot(test_settings: Settings, redis_client: redis.Redis) -> Iterator[HotState]:
    prefix = f"{test_settings.key_prefix}reactrun"
    _delete_prefix(redis_client, prefix)
    yield HotState(redis_client, Keys(prefix))
    _delete_prefix(redis_client, prefix)


def runner(hot: HotState, chat: ScriptedChat, ledger: MemoryEffectLedger) -> AgentStepRunner:
    return AgentStepRunner(
        chat=chat,
        state=hot,
        tools=load_tools(["planloop.workers.toolsets.bench"]),
        effects=ledger,
        threads=ToolThreads(),
        breaker=BreakerPolicy(failures=1, window_s=30.0, cooldown_s=60.0),
        settings=Settings(default_step_timeout_s=5.0),
    )


def args(tools: list[str], timeout_s: float = 5.0) -> tuple[StepTaskArgs, dict[str, Any]]:
    task = StepTaskArgs(
        session_id=SID,
        step_id="agent",
        attempt=2,
        epoch=1,
        tool=REACT_TOOL,
        params={},
        timeout_s=timeout_s,
        idempotency_key=f"{SID}:agent",
        instruction="do the thing",
    )
    return task, {"tools": tools, "max_iterations": 4}


def told(chat: ScriptedChat, call: int) -> str:
    return chat.calls[call][1][-1]["content"]


def test_a_failing_tool_opens_its_breaker_and_the_next_call_fails_fast(hot: HotState) -> None:
    failing = {"value": 1, "simulate": {"fail_attempts": [2]}}  # the step's attempt is 2
    chat = ScriptedChat(
        {"tool": "bench.echo", "params": failing},
        {"tool": "bench.echo", "params": {"value": 1}},
        {"final_answer": {"gave_up": True}},
    )
    task, params = args(["bench.echo"])

    result = runner(hot, chat, MemoryEffectLedger()).run(task, params)

    assert result.answer == {"gave_up": True}
    assert "TransientToolError" in told(chat, 1)
    assert "unavailable: its breaker is open" in told(chat, 2)
    assert hot.r.hget(hot.keys.breaker("bench.echo"), "state") == "open"
    notes = [n for _, n in hot.progress(SID) if n["kind"] == "react_iteration"]
    assert [(n["iteration"], n["ok"]) for n in notes] == [("1", "0"), ("2", "0"), ("3", "")]


def test_params_that_do_not_fit_are_an_observation_and_leave_the_breaker_alone(
    hot: HotState,
) -> None:
    ledger = MemoryEffectLedger()
    chat = ScriptedChat(
        {"tool": "bench.write", "params": {"label": ""}},
        {"tool": "bench.write", "params": {"label": "ok"}},
        {"final_answer": {"wrote": True}},
    )
    task, params = args(["bench.write"])

    runner(hot, chat, ledger).run(task, params)

    assert "params do not fit" in told(chat, 1)
    assert hot.r.exists(hot.keys.breaker("bench.write")) == 0
    assert ledger.counts == {f"{SID}:agent:react:2": 1}  # the turn's own idempotency key


def test_a_hanging_tool_is_cut_at_the_steps_deadline(hot: HotState) -> None:
    chat = ScriptedChat(
        {"tool": "bench.echo", "params": {"value": 1, "simulate": {"hang": True}}},
        {"final_answer": {"never": "asked"}},
    )
    task, params = args(["bench.echo"], timeout_s=0.3)

    with pytest.raises(ReactStopped) as stopped:
        runner(hot, chat, MemoryEffectLedger()).run(task, params)

    assert isinstance(stopped.value.cause, ToolTimeoutError)
    assert len(chat.calls) == 1  # the deadline stopped the loop before the next turn
    (turn,) = stopped.value.iterations
    assert turn.observation is not None
    assert "ToolTimeoutError" in turn.observation.error


def test_no_turn_starts_once_the_sessions_token_budget_is_spent(hot: HotState) -> None:
    """The hash says 50 tokens were spent; each scripted turn costs 110: 50 + 110 < 200,
    50 + 220 >= 200, so the third turn never starts."""
    options = SessionOptions(max_tokens=200).model_dump_json(exclude_defaults=True)
    usage = json.dumps({"m-earlier": [40, 10]})
    hot.r.hset(hot.keys.session(SID), mapping={"options": options, "llm_usage": usage})
    turn = {"tool": "bench.echo", "params": {"value": 1}}
    chat = ScriptedChat(turn, turn, {"final_answer": {"never": "asked"}})
    task, params = args(["bench.echo"])

    with pytest.raises(ReactStopped) as stopped:
        runner(hot, chat, MemoryEffectLedger()).run(task, params)

    assert "token budget spent (270 of 200 tokens)" in str(stopped.value.cause)
    assert len(chat.calls) == 2
    assert len(stopped.value.iterations) == 2  # their usage still reaches the supervisor


def test_calls_whose_params_do_not_fit_stall_the_step_at_the_settings_threshold(
    hot: HotState,
) -> None:
    chat = ScriptedChat(
        {"tool": "bench.write", "params": {"label": ""}},
        {"tool": "bench.write", "params": {"text": "no such param"}},
        {"final_answer": {"never": "asked"}},
    )
    task, params = args(["bench.write"])
    ledger = MemoryEffectLedger()
    strict = replace(runner(hot, chat, ledger), settings=Settings(react_stall_refusals=2))

    with pytest.raises(ReactStopped) as stopped:
        strict.run(task, params)

    cause = stopped.value.cause
    assert isinstance(cause, AgentStepStalled)
    assert (cause.rule, cause.count) == ("refused", 2)
    assert "ToolParamsError: tool 'bench.write': params do not fit" in str(cause)
    assert len(chat.calls) == 2  # the model was not asked a third time
    assert ledger.counts == {}  # nothing was written
