"""The LLM meter's accounting (core/llm_meter.py): a call is charged as it arrives, counted
once, and none starts on a spent budget. No Redis, no network."""

from __future__ import annotations

import contextvars

import pytest

from planloop.config.settings import ModelPrice, Settings
from planloop.core.errors import LLMBudgetSpentError
from planloop.core.llm_budget import Budget, reconcile
from planloop.core.llm_meter import METER, Charge, MemoryCallLedger, UsageMeter, current_meter
from planloop.core.models import SessionOptions
from planloop.core.record import Checkpoint
from planloop.planner import llm_metering
from planloop.planner.llm import Role, Usage
from planloop.planner.react import ReactResult, ReactStopped, usage_payload, usages_of
from planloop.supervisor.session.decision_log import record_usage
from planloop.supervisor.session.state import SessionState
from planloop.supervisor.session.usage_ledger import (
    count_reported,
    reconcile_recorded,
    session_meter,
)

PRICES = {"m": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)}


def meter(
    ledger: MemoryCallLedger,
    max_tokens: int | None = None,
    counted: dict[str, list[int]] | None = None,
) -> UsageMeter:
    return UsageMeter(
        "s1",
        ledger,
        budget=lambda: Budget(max_tokens, None),
        prices=PRICES,
        counted=lambda: dict(counted or {}),
    )


class BrokenLedger(MemoryCallLedger):
    def record_llm_call(self, charge: Charge) -> None:
        raise OSError("database is down")


def test_a_charge_is_written_to_the_ledger_with_its_step_and_attempt() -> None:
    ledger = MemoryCallLedger()
    m = UsageMeter(
        "s1", ledger, budget=lambda: Budget(None, None), prices=PRICES, step_id="a", attempt=2
    )
    m.charge("react", "m", 100, 20, 0.5)
    m.charge("react", "m", 5, 1, 0.1)
    assert [(c.step_id, c.attempt, c.prompt_tokens) for c in ledger.charges] == [
        ("a", 2, 100),
        ("a", 2, 5),
    ]
    assert ledger.usage_of("s1") == {"m": [105, 21]}
    assert ledger.usage_of("other") == {}
    assert m.total() == {"m": [105, 21]}


def test_no_call_starts_once_counted_and_charged_spend_reach_the_budget() -> None:
    ledger = MemoryCallLedger()
    m = meter(ledger, max_tokens=200, counted={"m": [100, 0]})
    m.check("planner")  # 100 of 200: the call may start
    m.charge("planner", "m", 90, 10, 0.0)  # now 200: one call may end over, no more start
    with pytest.raises(LLMBudgetSpentError) as refused:
        m.check("planner")
    assert refused.value.session_id == "s1"
    assert "token budget spent (200 of 200 tokens)" in str(refused.value)
    assert "no planner call is started" in str(refused.value)


def test_a_meter_whose_counted_spend_includes_its_charges_counts_them_once() -> None:
    ledger = MemoryCallLedger()
    m = UsageMeter(
        "s1",
        ledger,
        budget=lambda: Budget(150, None),
        prices=PRICES,
        counted=lambda: ledger.usage_of("s1"),
        includes_own=True,
    )
    m.charge("react", "m", 100, 0, 0.0)
    assert m.total() == {"m": [100, 0]}
    m.check("react")  # 100 of 150, not 200
    m.charge("react", "m", 50, 0, 0.0)
    with pytest.raises(LLMBudgetSpentError):
        m.check("react")


def test_a_ledger_that_fails_loses_the_record_not_the_count() -> None:
    m = meter(BrokenLedger(), max_tokens=50)
    m.charge("critic", "m", 60, 0, 0.0)  # logged, not raised: the answer is not lost
    assert m.total() == {"m": [60, 0]}
    with pytest.raises(LLMBudgetSpentError):
        m.check("summarizer")


def test_the_client_charges_through_the_meter_of_its_context_and_marks_it_recorded() -> None:
    ledger = MemoryCallLedger()
    served = Usage(30, 5, 0.2, "m", "decider")
    assert llm_metering.charged(served) == served  # no meter: not charged, not marked
    assert current_meter() is None

    def in_session() -> Usage:
        METER.set(meter(ledger, max_tokens=35))
        charged = llm_metering.charged(served)
        with pytest.raises(LLMBudgetSpentError), llm_metering.metered(Role.DECIDER):
            pass
        return charged

    charged = contextvars.copy_context().run(in_session)
    assert charged.recorded
    assert charged.prompt_tokens == 30
    assert ledger.usage_of("s1") == {"m": [30, 5]}
    summed = llm_metering.sum_usages([charged, Usage(1, 1, 0.0, "m", "decider")])
    assert not summed.recorded  # one unrecorded call: the sum must still be recorded


def test_reconcile_takes_the_larger_count_of_each_model() -> None:
    hashed = {"m": [100, 10], "n": [5, 5]}
    recorded = {"m": [120, 8], "o": [1, 2]}
    assert reconcile(hashed, recorded) == {"m": [120, 10], "n": [5, 5], "o": [1, 2]}
    assert reconcile() == {}


def test_the_loop_counts_meter_charges_batch_calls_and_worker_reports_once_each() -> None:
    ledger = MemoryCallLedger()
    state = SessionState("s1", 1)
    state.llm_usage = {"m": [10, 0]}  # restored
    m = UsageMeter("s1", ledger, budget=lambda: Budget(None, None), prices=PRICES)
    m.counted = state.unmetered_usage
    state.metered = m
    m.charge("decider", "m", 100, 10, 0.0)  # the loop's own call, charged as it arrived
    recorded = Usage(100, 10, 0.0, "m", "decider", recorded=True)
    record_usage(state.batch, [recorded])  # the caller records it again: skipped
    assert state.batch.llm_calls == []
    record_usage(state.batch, [Usage(1, 1, 0.0, "m", "critic")])  # an unmetered twin's
    worker = usages_of(usage_payload([Usage(7, 3, 0.0, "m", "react", recorded=True)]))
    count_reported(state, worker)
    record_usage(state.batch, worker)  # charged by the worker: counted, not recorded here
    assert len(state.batch.llm_calls) == 1
    assert state.fold_usage() == {"m": [10 + 100 + 1 + 7, 0 + 10 + 1 + 3]}
    assert state.fold_usage() == {"m": [118, 14]}  # not counted twice
    assert m.total() == {"m": [118, 14]}  # what the meter checks against
    batch, _ = state.take_checkpoint()
    assert isinstance(batch, Checkpoint)
    assert len(batch.llm_calls) == 1
    assert state.fold_usage() == {"m": [118, 14]}


def test_a_takeover_counts_what_the_ledger_has_beyond_the_hash() -> None:
    state = SessionState("s1", 2)
    state.llm_usage = {"m": [100, 10]}  # the session hash, written before the last call
    reconcile_recorded(state, {"m": [160, 12]})  # the ledger has the call after it
    assert state.fold_usage() == {"m": [160, 12]}


def test_an_agent_steps_usage_is_every_charged_call_when_metered() -> None:
    charged = [Usage(5, 1, 0.0, "m", "react", recorded=True)] * 2
    assert ReactResult("x", [], charged).usages == charged
    assert ReactResult("x", []).usages == []
    stopped = ReactStopped(RuntimeError("unusable"), [], charged)
    assert stopped.usages == charged
    rows = usage_payload(stopped.usages)
    assert all(row["recorded"] for row in rows)
    assert all(u.recorded for u in usages_of(rows))


def test_the_loops_check_counts_calls_only_the_ledger_has() -> None:
    ledger = MemoryCallLedger()
    state = SessionState("s1", 1)
    state.info = state.info.model_copy(update={"options": SessionOptions(max_tokens=100)})
    m = session_meter(state, Settings(llm_prices=PRICES), ledger)
    assert state.metered is m
    m.charge("decider", "m", 40, 0, 0.0)
    m.check("critic")  # 40 of 100
    # an agent step's worker died after charging its turns; no event told the loop
    ledger.record_llm_call(Charge("s1", "react", "m", 70, 0, 0.0, "agent", 1))
    with pytest.raises(LLMBudgetSpentError):
        m.check("critic")  # 110 of 100: counted once each, the loop's own call included
    assert m.total() == {"m": [110, 0]}
    assert state.fold_usage() == {"m": [40, 0]}  # the loop's view until a takeover
