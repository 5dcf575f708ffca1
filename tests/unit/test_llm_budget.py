"""LLM token and cost budgets: the accounting per model, the price table, and the decision
when a budget is spent (like a spent re-plan budget). No Redis, no LLM."""

from __future__ import annotations

import json
import logging
from typing import TypeVar

import pytest
from pydantic import BaseModel

from planloop.config.settings import ModelPrice, Settings
from planloop.core.catalogue import SensitiveNames
from planloop.core.llm_budget import Budget, Spend, budget_line, budget_view, spend_of
from planloop.core.models import (
    Event,
    EventType,
    SessionOptions,
    SessionRecord,
    SessionStatus,
    Severity,
    StepStatus,
)
from planloop.planner.decision import ReplanAction
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.supervisor.session.decision_log import record_decision, record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.state import FINAL
from tests.unit.loop_fixtures import Loop, run, step
from tests.unit.test_session_loop_turns import decisions, runner

T = TypeVar("T", bound=BaseModel)
PRICES = {"m-a": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)}


class ScriptedChat:
    """Answers every decider call with a re-plan, at a fixed token count."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.calls: list[Role] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        self.calls.append(role)
        answer = schema.model_validate(
            {"action": "REPLAN_REMAINING", "reasoning": "try another way", "confidence": 0.9}
        )
        return answer, Usage(self.tokens - 10, 10, 0.01, "m-a", str(role))


def usage(prompt: int, completion: int, model: str = "m-a") -> Usage:
    return Usage(prompt, completion, 0.0, model, "planner")


def loop_with(settings: Settings, chat: ScriptedChat | None = None) -> Loop:
    loop = Loop(Plan(steps=[step("a"), step("b", "a")]), settings)
    loop.deliberation = Deliberation(
        loop.state, settings, chat, loop.tools, SensitiveNames(loop.tools)
    )
    return loop


def failure(loop: Loop, step_id: str) -> Event:
    loop.state.states[step_id].status = StepStatus.FAILED
    loop.state.states[step_id].note = FINAL
    return Event(type=EventType.TASK_FAILED, severity=Severity.CRITICAL, step_id=step_id)


# --- accounting ---------------------------------------------------------------------------
def test_every_recorded_call_is_counted_once_per_model_across_checkpoints() -> None:
    loop = loop_with(Settings())
    state = loop.state
    record_usage(state.batch, [usage(100, 20), usage(5, 5, "m-b")])
    assert state.fold_usage() == {"m-a": [100, 20], "m-b": [5, 5]}
    assert state.fold_usage() == {"m-a": [100, 20], "m-b": [5, 5]}  # not counted twice
    record_usage(state.batch, [usage(1, 1)])
    batch, _ = state.take_checkpoint()
    assert len(batch.llm_calls) == 3  # SQL still gets every call
    record_usage(state.batch, [usage(10, 0)])
    assert state.fold_usage() == {"m-a": [111, 21], "m-b": [5, 5]}


def test_cost_is_priced_per_model_and_an_unknown_model_costs_nothing_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        spend = spend_of({"m-a": [1_000_000, 500_000], "mystery": [10, 10]}, PRICES)
        spend_of({"mystery": [1, 1]}, PRICES)
    assert spend == Spend(tokens=1_500_020, cost_usd=2.0)
    warnings = [r for r in caplog.records if "'mystery' has no price" in r.getMessage()]
    assert len(warnings) == 1


def test_the_budget_names_what_is_spent_and_options_override_the_settings() -> None:
    settings = Settings(session_max_tokens=1000, session_max_cost_usd=5.0)
    assert Budget.of(SessionOptions(), settings) == Budget(1000, 5.0)
    budget = Budget.of(SessionOptions(max_tokens=50, max_cost_usd=0.01), settings)
    assert budget == Budget(50, 0.01)
    assert budget.spent(Spend(49, 0.0)) is None
    assert budget.spent(Spend(50, 0.0)) == "token budget spent (50 of 50 tokens)"
    assert budget.spent(Spend(10, 0.02)) == "cost budget spent ($0.020000 of $0.01)"
    assert Budget.of(SessionOptions(), Settings()).spent(Spend(10**9, 10**6)) is None


def test_prices_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PLANLOOP_LLM_PRICES", '{"local": {"input_per_mtok": 0.5, "output_per_mtok": 1}}'
    )
    prices = Settings().llm_prices
    assert prices == {"local": ModelPrice(input_per_mtok=0.5, output_per_mtok=1.0)}
    assert "gpt-4o-mini" in Settings.model_fields["llm_prices"].get_default(
        call_default_factory=True
    )


def test_the_running_totals_survive_in_the_session_hash_and_are_shown() -> None:
    fields = {"options": '{"max_tokens": 100}', "llm_usage": '{"m-a": [60, 15]}'}
    record = SessionRecord.from_fields("s9", fields)
    assert record.llm_usage == {"m-a": [60, 15]}
    view = budget_view(record.llm_usage, record.options, Settings(llm_prices=PRICES))
    assert view == {"tokens": 75, "max_tokens": 100, "cost_usd": 0.00009, "max_cost_usd": None}
    assert budget_line(view) == "tokens 75/100  cost $0.0001/-"


# --- the decision -------------------------------------------------------------------------
def test_a_spent_token_budget_forces_an_abort_without_calling_the_model() -> None:
    chat = ScriptedChat(tokens=50)
    loop = loop_with(Settings(session_max_tokens=100), chat)
    loop.state.llm_usage = {"m-a": [90, 10]}
    loop.deliberation.note(failure(loop, "a"))
    decision = run(loop.deliberation.maybe_decide(idle=True))
    assert decision is not None
    verdict = decision.verdict
    assert (verdict.choice.action, verdict.source) == (ReplanAction.ABORT, "budget")
    assert verdict.choice.reasoning == "token budget spent (100 of 100 tokens): forced ABORT"
    assert chat.calls == []
    run(loop.changes.execute(decision, loop.deliberation))
    assert loop.state.outcome == (SessionStatus.ABORTED, verdict.choice.reasoning)


def test_a_spent_budget_waits_for_a_person_when_approval_on_budget() -> None:
    settings = Settings(session_max_cost_usd=0.001, approval_on_budget=True, llm_prices=PRICES)
    chat = ScriptedChat(tokens=50)
    loop = loop_with(settings, chat)
    loop.state.llm_usage = {"m-a": [1000, 0]}  # $0.001
    loop.deliberation.note(failure(loop, "a"))
    decision = run(loop.deliberation.maybe_decide(idle=True))
    assert decision is not None
    assert decision.verdict.source == "await_human"
    assert decision.verdict.choice.reasoning.startswith("cost budget spent ($0.001000 of")
    run(loop.changes.execute(decision, loop.deliberation))
    assert loop.state.outcome is None
    assert loop.session_hash()["awaiting"] == "approval"
    assert chat.calls == []


def test_the_decision_call_that_spends_the_budget_starts_no_replan() -> None:
    chat = ScriptedChat(tokens=600)
    loop = loop_with(Settings(), chat)
    loop.state.info = loop.state.info.model_copy(update={"options": SessionOptions(max_tokens=500)})
    loop.deliberation.note(failure(loop, "a"))
    decision = run(loop.deliberation.maybe_decide(idle=True))
    assert decision is not None
    assert decision.verdict.choice.action == ReplanAction.REPLAN_REMAINING  # the LLM's
    record_decision(loop.state.batch, "s1", decision)  # as the loop does before carrying out
    run(loop.changes.execute(decision, loop.deliberation))
    assert chat.calls == [Role.DECIDER]  # the re-planner was never asked
    assert loop.state.outcome == (
        SessionStatus.ABORTED,
        "token budget spent (600 of 500 tokens): forced ABORT",
    )
    assert [d["source"] for d in loop.decisions()] == ["llm", "budget"]


# --- the loop after LLM calls -----------------------------------------------------------------
def test_the_loop_keeps_the_totals_in_the_hash_and_aborts_once_a_call_spends_the_budget() -> None:
    loop, store = runner(Plan(steps=[step("a")]), session_max_tokens=100)
    session_key = store.keys.session(loop.sid)
    record_usage(loop.state.batch, [usage(40, 10)])
    run(loop.usage.check())
    assert json.loads(store.hashes[session_key]["llm_usage"]) == {"m-a": [40, 10]}
    assert loop.state.outcome is None
    loop.state.take_checkpoint()  # the calls went to SQL; the totals stay
    record_usage(loop.state.batch, [usage(45, 5)])
    run(loop.usage.check())
    assert json.loads(store.hashes[session_key]["llm_usage"]) == {"m-a": [85, 15]}
    assert loop.state.outcome == (
        SessionStatus.ABORTED,
        "token budget spent (100 of 100 tokens): forced ABORT",
    )
    assert [d["source"] for d in decisions(loop)] == ["budget"]
