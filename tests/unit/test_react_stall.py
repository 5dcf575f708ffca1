"""Stall detection in the ReAct loop: the pure detector over sequences of turns, the loop that
stops on it, the error kind the worker gives it and the settings that set it. No Redis."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from planloop.config.settings import Settings
from planloop.core.errors import AgentStepStalled, PermanentToolError, ToolParamsError
from planloop.core.models import RETRYABLE, ErrorKind
from planloop.core.tools import ToolContext
from planloop.planner.llm import Usage
from planloop.planner.plan import Step
from planloop.planner.react import Iteration, Observation, ReactAgent, ReactStopped
from planloop.planner.react_stall import StallRules, find_stall
from planloop.supervisor.session.policy import RuleAction, decide_failure
from planloop.workers.outcomes import classify_error
from tests.unit.test_react import TOOLS, ScriptedChat, task

USAGE = Usage(1, 1, 0.0, "m", "react")
RULES = StallRules(repeats=3, refusals=3)


def call(tool: str = "ecommerce.inventory", result: Any = None, **params: Any) -> Iteration:
    """A turn that called ``tool`` with ``params`` and got ``result`` back."""
    seen = Observation(True, {"stock": 0} if result is None else result)
    return Iteration(0, "", tool, params or {"product_id": "S"}, seen, USAGE)


def refused(tool: str = "web.search", **params: Any) -> Iteration:
    seen = Observation(False, error=f"tool {tool!r} is not allowed here", refused=True)
    return Iteration(0, "", tool, params or {"q": "x"}, seen, USAGE)


def failed(error: str = "TransientToolError: 503") -> Iteration:
    seen = Observation(False, error=error)
    return Iteration(0, "", "ecommerce.inventory", {"product_id": "S"}, seen, USAGE)


def final() -> Iteration:
    return Iteration(0, "", None, {}, None, USAGE)


# --- the detector -------------------------------------------------------------------------
def test_three_identical_observations_are_a_repeated_stall() -> None:
    stall = find_stall("agent", [call(), call(), call()], RULES)

    assert stall is not None
    assert (stall.rule, stall.count, stall.step_id) == ("repeated", 3, "agent")
    assert stall.call == 'ecommerce.inventory {"product_id": "S"}'
    message = str(stall)
    assert "agent step 'agent' stalled (repeated)" in message
    assert "the same call gave the same observation 3 times in a row" in message
    assert 'ecommerce.inventory {"product_id": "S"}' in message
    assert '{"stock": 0}' in message  # the observation it kept getting


def test_two_identical_observations_are_not_a_stall_yet() -> None:
    assert find_stall("agent", [call(), call()], RULES) is None


def test_params_key_order_does_not_make_a_call_different() -> None:
    turns = [call(a=1, b=2), call(b=2, a=1), call(a=1, b=2)]

    stall = find_stall("agent", turns, RULES)

    assert stall is not None
    assert stall.rule == "repeated"


@pytest.mark.parametrize(
    "middle",
    [
        call(product_id="OTHER"),  # other params
        call("ecommerce.order_stats"),  # another tool, same params
        call(result={"stock": 5}),  # same call, the answer changed: progress
    ],
    ids=["params", "tool", "result"],
)
def test_a_different_call_or_result_breaks_the_streak(middle: Iteration) -> None:
    turns = [call(), call(), middle, call(), call()]

    assert find_stall("agent", turns, RULES) is None
    assert find_stall("agent", [*turns, call()], RULES) is not None  # a new streak of three


def test_the_same_output_from_different_calls_is_not_a_stall() -> None:
    turns = [call(product_id=p, result={}) for p in ("A", "B", "C", "D")]

    assert find_stall("agent", turns, RULES) is None


def test_outputs_that_differ_past_the_text_cut_are_different_results() -> None:
    long = "x" * 5000  # the model's text is cut at OBSERVATION_CHARS (4000)
    turns = [call(result={"text": long + tail}) for tail in ("1", "2", "3")]

    assert find_stall("agent", turns, RULES) is None


def test_the_same_error_three_times_is_a_repeated_stall() -> None:
    stall = find_stall("agent", [failed(), failed(), failed()], RULES)

    assert stall is not None
    assert stall.rule == "repeated"
    assert "error: TransientToolError: 503" in str(stall)


def test_three_refused_calls_in_a_row_are_a_refused_stall_whatever_the_tools() -> None:
    turns = [refused("web.search"), refused("web.fetch", url="u"), refused("db.query", sql="s")]

    stall = find_stall("agent", turns, RULES)

    assert stall is not None
    assert (stall.rule, stall.count) == ("refused", 3)
    assert stall.call == 'db.query {"sql": "s"}'  # the last one
    message = str(stall)
    assert "3 tool calls in a row were refused; the last: db.query" in message
    assert "'db.query' is not allowed here" in message  # why it was refused


def test_the_same_unknown_tool_three_times_says_refused_not_repeated() -> None:
    stall = find_stall("agent", [refused(), refused(), refused()], RULES)

    assert stall is not None
    assert stall.rule == "refused"


def test_a_call_that_ran_breaks_a_refusal_streak_even_when_it_failed() -> None:
    turns = [refused(), refused(), failed(), refused(), refused()]

    assert find_stall("agent", turns, RULES) is None
    assert find_stall("agent", [*turns, refused()], RULES) is not None


def test_a_final_answer_ends_every_streak() -> None:
    assert find_stall("agent", [call(), call(), final(), call()], RULES) is None
    assert find_stall("agent", [refused(), refused(), final(), refused()], RULES) is None


@pytest.mark.parametrize(
    ("rules", "repeated_at", "refused_at"),
    [
        (StallRules(repeats=2, refusals=1), 2, 1),
        (StallRules(repeats=5, refusals=4), 5, 4),
        (StallRules(repeats=0, refusals=0), None, None),  # 0: the rule is off
    ],
)
def test_the_thresholds(rules: StallRules, repeated_at: int | None, refused_at: int | None) -> None:
    def first_stall(make: Any) -> int | None:
        turns: list[Iteration] = []
        for n in range(1, 9):
            turns.append(make())
            if find_stall("agent", turns, rules) is not None:
                return n
        return None

    assert first_stall(call) == repeated_at
    assert first_stall(refused) == refused_at


def test_secret_params_are_masked_in_the_stall_error() -> None:
    turns = [call(api_key="sk-live-123", product_id="S") for _ in range(3)]

    stall = find_stall("agent", turns, RULES)

    assert stall is not None
    assert "sk-live-123" not in str(stall)
    assert '"product_id": "S"' in str(stall)


# --- the loop stops on a stall ------------------------------------------------------------
def test_the_loop_stops_after_the_third_identical_observation_without_asking_again() -> None:
    turn = {"tool": "ecommerce.inventory", "params": {"product_id": "S"}}
    chat = ScriptedChat(turn, turn, turn, turn, {"final_answer": {"never": "asked"}})
    calls: list[tuple[int, str]] = []

    def same_answer(number: int, tool: str, params: dict[str, Any]) -> Observation:
        calls.append((number, tool))
        return Observation(True, {"stock": 0})

    with pytest.raises(ReactStopped) as stopped:
        ReactAgent(chat).run(task(max_iterations=10), same_answer)

    assert isinstance(stopped.value.cause, AgentStepStalled)
    assert stopped.value.cause.rule == "repeated"
    assert len(calls) == 3
    assert len(chat.calls) == 3  # the model was not asked a fourth time
    assert len(stopped.value.iterations) == 3  # their tokens are still accounted


def test_the_loop_stops_after_three_unknown_tools_in_a_row() -> None:
    chat = ScriptedChat(
        {"tool": "web.search", "params": {"q": "a"}},
        {"tool": "web.search", "params": {"q": "b"}},
        {"tool": "no.such", "params": {}},
        {"final_answer": {"never": "asked"}},
    )
    calls: list[str] = []

    def run(number: int, tool: str, params: dict[str, Any]) -> Observation:
        calls.append(tool)
        return Observation(True, {})

    with pytest.raises(ReactStopped) as stopped:
        ReactAgent(chat).run(task(max_iterations=10), run)

    cause = stopped.value.cause
    assert isinstance(cause, AgentStepStalled)
    assert cause.rule == "refused"
    assert calls == []  # nothing ran
    assert len(chat.calls) == 3


def test_the_loop_takes_its_thresholds_from_the_task() -> None:
    turn = {"tool": "web.search", "params": {"q": "a"}}
    chat = ScriptedChat(turn, turn, turn, {"final_answer": {"ok": True}})
    lenient = task(max_iterations=10)
    lenient = type(lenient)(**{**lenient.__dict__, "stall": StallRules(refusals=0, repeats=0)})

    result = ReactAgent(chat).run(lenient, lambda *_: Observation(True, {}))

    assert result.answer == {"ok": True}


# --- what the rest of the system makes of it ----------------------------------------------
def test_params_that_do_not_fit_raise_a_tool_params_error() -> None:
    spec = TOOLS.get("ecommerce.inventory")
    ctx = ToolContext(session_id="s", step_id="agent", attempt=1, idempotency_key="s:agent")

    with pytest.raises(ToolParamsError) as raised:
        spec.run({"no_such_param": 1}, ctx)

    assert isinstance(raised.value, PermanentToolError)  # never retried
    assert raised.value.tool_name == "ecommerce.inventory"
    assert "params do not fit" in str(raised.value)


def test_a_stall_is_its_own_permanent_error_kind() -> None:
    stall = AgentStepStalled("agent", "refused", 3, "web.search {}")

    assert classify_error(stall) == ErrorKind.STALLED
    assert ErrorKind.STALLED not in RETRYABLE


@pytest.mark.parametrize(
    ("critical", "fallback", "action"),
    [
        (False, False, RuleAction.SKIP_BRANCH),
        (True, False, RuleAction.FAIL_SESSION),
        (True, True, RuleAction.FALLBACK),
    ],
)
def test_the_rule_policy_treats_a_stall_like_a_permanent_failure(
    critical: bool, fallback: bool, action: RuleAction
) -> None:
    fallback_steps = [{"id": "alt", "tool": "ecommerce.inventory", "params": {"product_id": "S"}}]
    step = Step.model_validate(
        {
            "id": "agent",
            "tool": "agent.react",
            "instruction": "look",
            "params": {"tools": ["ecommerce.inventory"]},
            "critical": critical,
            **({"fallback": fallback_steps} if fallback else {}),
        }
    )

    # attempt 1 of 2 retries: a retryable kind would be retried
    assert decide_failure(step, 1, ErrorKind.STALLED, max_retries=2) == action


def test_the_thresholds_are_settings_with_defaults_of_three() -> None:
    assert (Settings().react_stall_repeats, Settings().react_stall_refusals) == (3, 3)
    tuned = Settings(react_stall_repeats=0, react_stall_refusals=1)
    assert (tuned.react_stall_repeats, tuned.react_stall_refusals) == (0, 1)
    with pytest.raises(ValidationError, match="one call is not a repetition"):
        Settings(react_stall_repeats=1)
    with pytest.raises(ValidationError):
        Settings(react_stall_refusals=-1)
