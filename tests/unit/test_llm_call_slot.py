"""Calls of one session made at once cannot each pass the budget check (core/llm_meter.py):
with a budget, :meth:`UsageMeter.metered` holds the session's call slot from the check to the
charge. No Redis here: the slot is a thread lock (core/llm_slot.py is its Redis twin)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from planloop.config.settings import ModelPrice
from planloop.core.errors import LLMBudgetSpentError
from planloop.core.llm_budget import Budget
from planloop.core.llm_meter import MemoryCallLedger, UsageMeter

PRICES = {"m": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)}


def thread_slot() -> tuple[Callable[[], AbstractContextManager[object]], list[int]]:
    """A slot on a thread lock, and how many held it at once, at each entry."""
    lock, holders, seen = threading.Lock(), [0], []

    @contextmanager
    def hold() -> Iterator[object]:
        with lock:
            holders[0] += 1
            seen.append(holders[0])
            try:
                yield lock
            finally:
                holders[0] -= 1

    return hold, seen


def parallel_calls(meter: UsageMeter, calls: int, tokens: int) -> list[str]:
    """``calls`` threads each making one 'call' of ``tokens``; what each one got."""
    outcomes: list[str] = []
    start = threading.Barrier(calls)

    def one() -> None:
        start.wait()
        try:
            with meter.metered("react"):
                time.sleep(0.02)  # the request: every other thread is at its check now
                meter.charge("react", "m", tokens, 0, 0.02)
            outcomes.append("called")
        except LLMBudgetSpentError:
            outcomes.append("refused")

    threads = [threading.Thread(target=one) for _ in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_parallel_calls_of_a_session_with_a_budget_end_at_most_one_call_over() -> None:
    ledger = MemoryCallLedger()
    slot, seen = thread_slot()
    meter = UsageMeter(
        "s1",
        ledger,
        budget=lambda: Budget(250, None),
        prices=PRICES,
        counted=lambda: ledger.usage_of("s1"),
        includes_own=True,
        slot=slot,
    )

    outcomes = parallel_calls(meter, calls=6, tokens=100)

    # 0, 100, 200 are under 250: three calls start; at 300 the rest are refused
    assert sorted(outcomes) == ["called"] * 3 + ["refused"] * 3
    assert ledger.usage_of("s1") == {"m": [300, 0]}
    assert max(seen) == 1  # never two in the slot


def test_without_the_slot_parallel_calls_all_pass_the_same_check() -> None:
    """The defect the slot fixes (what the chaos bench found with two agent steps)."""
    ledger = MemoryCallLedger()
    meter = UsageMeter(
        "s1",
        ledger,
        budget=lambda: Budget(250, None),
        prices=PRICES,
        counted=lambda: ledger.usage_of("s1"),
        includes_own=True,
    )

    assert parallel_calls(meter, calls=6, tokens=100) == ["called"] * 6


def test_a_session_without_a_budget_never_takes_the_slot() -> None:
    taken: list[str] = []

    @contextmanager
    def slot() -> Iterator[object]:
        taken.append("slot")
        yield None

    meter = UsageMeter(
        "s1", MemoryCallLedger(), budget=lambda: Budget(None, None), prices=PRICES, slot=slot
    )
    with meter.metered("critic"):
        pass
    assert taken == []


def test_a_refused_call_frees_the_slot() -> None:
    ledger = MemoryCallLedger()
    slot, seen = thread_slot()
    meter = UsageMeter(
        "s1",
        ledger,
        budget=lambda: Budget(10, None),
        prices=PRICES,
        counted=lambda: ledger.usage_of("s1"),
        includes_own=True,
        slot=slot,
    )
    meter.charge("planner", "m", 20, 0, 0.0)
    for _ in range(2):  # a held slot would block the second refusal forever
        with pytest.raises(LLMBudgetSpentError), meter.metered("planner"):
            pass
    assert seen == [1, 1]
