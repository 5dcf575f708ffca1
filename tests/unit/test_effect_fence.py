"""The attempt fence and the store fault: a timed-out attempt applies no effect, an effect
already applying commits once, and a store that refuses the write is no tool's failure."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from planloop.core.effect_fence import AttemptFence
from planloop.core.effects import EffectAudit, SqlEffectLedger
from planloop.core.errors import LateEffectRefused, StoreWriteError, TransientToolError
from planloop.core.models import ErrorKind, EventType, SessionStatus, StepStatus
from planloop.core.tools import MemoryEffectLedger, ToolContext
from planloop.planner.plan import Plan
from planloop.supervisor.session.failures import settle_failure
from planloop.supervisor.session.policy import RuleAction, decide_failure
from planloop.supervisor.session.state import FINAL, session_end
from planloop.workers.outcomes import Outcome, classify_error, failed, tool_health
from planloop.workers.react import call_text
from tests.unit.loop_fixtures import Loop, step


def context(fence: AttemptFence, key: str = "s1:a") -> ToolContext:
    return ToolContext("s1", "a", 1, key, tool="bench.write", fence=fence)


def receipt() -> dict[str, Any]:
    return {"receipt_id": "R-1"}


def test_a_closed_fence_refuses_an_effect_and_the_memory_ledger_applies_nothing() -> None:
    ledger, fence = MemoryEffectLedger(), AttemptFence("a", 1)
    assert fence.close() is False  # nothing was applying
    with pytest.raises(LateEffectRefused, match="attempt 1 timed out"):
        ledger.apply_once("s1:a", receipt, context(fence))
    assert ledger.counts == {}
    assert ledger.apply_once("s1:a", receipt, context(AttemptFence("a", 2))) == receipt()
    assert ledger.counts == {"s1:a": 1}


def test_closing_the_fence_while_an_effect_applies_lets_it_land_and_says_so() -> None:
    fence = AttemptFence("a", 1)
    with fence.applying("s1:a"):
        assert fence.close() is True
    with pytest.raises(LateEffectRefused):
        fence.admit("s1:a")


@pytest.fixture
def sql(tmp_path: Path) -> tuple[SqlEffectLedger, EffectAudit]:
    audit = EffectAudit(tmp_path / "effects.jsonl")
    return SqlEffectLedger(f"sqlite:///{tmp_path / 'record.db'}", audit=audit), audit


def test_the_sql_ledger_refuses_a_late_effect_and_audits_the_refusal(
    sql: tuple[SqlEffectLedger, EffectAudit],
) -> None:
    ledger, audit = sql
    fence = AttemptFence("a", 1)
    fence.close()
    with pytest.raises(LateEffectRefused):
        ledger.apply_once("s1:a", receipt, context(fence))
    assert ledger.receipt("s1:a") is None
    assert audit.refusals() == {"s1:a": 1}
    assert audit.counts() == {}
    ledger.apply_once("s1:a", receipt, context(AttemptFence("a", 2)))
    assert audit.counts() == {"s1:a": 1}


def test_an_effect_applying_when_the_timeout_passes_commits_once_for_the_next_attempt(
    sql: tuple[SqlEffectLedger, EffectAudit],
) -> None:
    ledger, audit = sql
    fence, applying, closed = AttemptFence("a", 1), threading.Event(), threading.Event()

    def slow_receipt() -> dict[str, Any]:
        applying.set()
        closed.wait(5)
        return {"receipt_id": "R-late"}

    late = threading.Thread(target=ledger.apply_once, args=("s1:a", slow_receipt, context(fence)))
    late.start()
    assert applying.wait(5)
    assert fence.close() is True  # the timeout: the effect is already applying
    closed.set()
    late.join(5)
    again = ledger.apply_once("s1:a", receipt, context(AttemptFence("a", 2)))
    assert again == {"receipt_id": "R-late"}  # the next attempt reads it: applied once
    assert audit.counts() == {"s1:a": 1}


def test_a_database_that_refuses_the_write_is_a_store_fault(tmp_path: Path) -> None:
    (tmp_path / "record.db").mkdir()  # a folder where the database file should be
    ledger = SqlEffectLedger(f"sqlite:///{tmp_path / 'record.db'}")
    with pytest.raises(StoreWriteError, match="once the store recovers"):
        ledger.apply_once("s1:a", receipt, context(AttemptFence("a", 1)))


def test_a_store_fault_interrupts_the_attempt_and_says_nothing_of_the_tool() -> None:
    kind = classify_error(StoreWriteError("s1:a", "database or disk is full"))
    assert kind == ErrorKind.STORE
    outcome = failed(StoreWriteError("s1:a", "database or disk is full"), kind)
    assert (outcome.status, outcome.event) == (StepStatus.INTERRUPTED, EventType.TASK_INTERRUPTED)
    assert tool_health(outcome) is None  # the breaker does not count it
    assert classify_error(TransientToolError("blip")) == ErrorKind.TRANSIENT
    plain = Outcome(StepStatus.FAILED, EventType.TASK_FAILED, error_kind=ErrorKind.TRANSIENT)
    assert tool_health(plain) is False


def test_store_faults_are_retried_outside_the_budget_up_to_their_limit() -> None:
    plain = step("a")
    assert decide_failure(plain, 5, ErrorKind.STORE, 0, store_faults=5, store_retry_limit=5) == (
        RuleAction.RETRY
    )
    assert decide_failure(plain, 6, ErrorKind.STORE, 0, store_faults=6, store_retry_limit=5) == (
        RuleAction.SKIP_BRANCH
    )
    # four store faults, then a transient failure: the step's one retry is still there
    assert decide_failure(plain, 5, ErrorKind.TRANSIENT, 1, store_faults=4) == RuleAction.RETRY


def test_a_store_fault_waits_the_store_interval_and_counts_on_the_step() -> None:
    loop = Loop(Plan(steps=[step("a")]))
    st = loop.state.states["a"]
    st.status, st.error_kind, st.attempt = StepStatus.INTERRUPTED, ErrorKind.STORE, 1
    settled = settle_failure(
        loop.state,
        "a",
        max_retries=0,
        backoff_base_s=0.2,
        backoff_max_s=10.0,
        now=1_000.0,
        store_retry_interval_s=3.0,
        store_retry_limit=2,
    )
    assert settled.retry
    assert settled.fields["not_before"] == 1_003.0
    assert settled.fields["store_faults"] == 1 == st.store_faults


def test_a_step_the_store_never_took_fails_the_session_instead_of_completing_it() -> None:
    loop = Loop(Plan(steps=[step("a"), step("b")]), a=StepStatus.COMPLETED)
    st = loop.state.states["b"]
    st.status, st.note, st.error_kind = StepStatus.INTERRUPTED, FINAL, ErrorKind.STORE
    loop.state.candidates.discard("b")
    ended = session_end(loop.state, None, deliberating=False, now=1_000.0)
    assert ended is not None
    assert ended[0] == SessionStatus.FAILED
    assert "PLANLOOP_STORE_RETRY_LIMIT" in ended[1]


def test_an_agent_call_reads_the_same_whatever_the_order_of_its_params() -> None:
    assert call_text("bench.write", {"a": 1, "b": 2}) == call_text("bench.write", {"b": 2, "a": 1})
    assert call_text("bench.write", {"a": 1}) != call_text("bench.write", {"a": 2})
