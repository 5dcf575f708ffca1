"""The LLM meter: every model call a session causes is charged to it as its answer arrives.

"Record first, reconcile on takeover." The LLM clients (planner/openai_chat.py,
planner/embedding.py) ask the meter of the current context (:data:`METER`, set by the
session loop in the supervisor and around an agent step in a worker) two things per HTTP
call:

1. before the request, :meth:`UsageMeter.check`: a call does not start once the session's
   budget is spent (so a session ends at most one call over it). Calls of one session made
   at once (parallel agent steps on workers, the loop beside them) would each pass that
   check, so a session with a budget runs them one at a time: :meth:`UsageMeter.metered`
   holds the session's call slot (a lock every process shares, core/llm_slot.py) from the
   check until the call is charged, and each check sees every call before it;
2. as soon as the answer (or a stream's last chunk) is read, :meth:`UsageMeter.charge`:
   the call is written to the durable ledger (the SQL record's ``llm_calls``) before the
   caller may act on it, so a loop that then crashes, or a supervisor killed right after,
   loses nothing. A new owner reads the recorded total (:meth:`CallLedger.usage_of`).

Repair attempts, failed parses, the router, critic, summarizer, compressor, reflector,
embeddings and ReAct turns all go through the client, so all are charged. Nothing here knows
SQL: the ledger is a small interface (:class:`core.record.SqlRecord` is the real one,
:class:`MemoryCallLedger` the twin for unit tests).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from planloop.core.errors import LLMBudgetSpentError
from planloop.core.llm_budget import Budget, UsageByModel, add_calls, spend_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Charge:
    """One model call as the endpoint reported it, charged to a session."""

    session_id: str
    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    step_id: str = ""  # an agent step's calls (made on a worker) name the step ...
    attempt: int = 0  # ... and its attempt
    created_at: float = field(default_factory=time.time)
    # What was asked and answered, masked and cut (core/llm_transcript.py); None: not kept.
    prompt: str | None = None
    response: str | None = None

    def row(self) -> dict[str, Any]:
        """The ``llm_calls`` row (without the session id) of this call."""
        return {
            "created_at": self.created_at,
            "role": self.role,
            "model": self.model,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "step_id": self.step_id,
            "attempt": self.attempt,
            "prompt": self.prompt,
            "response": self.response,
        }


class CallLedger(Protocol):
    """Where charges are written durably, and read back as a session's total."""

    def record_llm_call(self, charge: Charge) -> None:
        """Write one call at once (its own transaction; never fenced: it was spent)."""
        ...

    def usage_of(self, sid: str) -> UsageByModel:
        """Every recorded call of ``sid``, as tokens per model."""
        ...


class MemoryCallLedger:
    """:class:`CallLedger` in memory (unit tests)."""

    def __init__(self) -> None:
        self.charges: list[Charge] = []
        self._lock = threading.Lock()

    def record_llm_call(self, charge: Charge) -> None:
        with self._lock:
            self.charges.append(charge)

    def usage_of(self, sid: str) -> UsageByModel:
        with self._lock:
            rows = [c.row() for c in self.charges if c.session_id == sid]
        usage: UsageByModel = {}
        add_calls(usage, rows)
        return usage


class UsageMeter:
    """Charges one session's calls (of one loop, or one agent-step attempt) to the ledger.

    Thread-safe: the supervisor's calls run in worker threads (``asyncio.to_thread``).

    Args:
        sid: The session charged.
        ledger: Where each call is written as it arrives.
        budget: The session's budgets, read at each check (options may arrive later).
        prices: The price table (``llm_prices``).
        counted: The session's spend known elsewhere, read at each check: without
            ``includes_own``, what this meter's own charges are not part of (the
            supervisor's totals of other sources); with it, the whole spend (a worker's
            read of the ledger the charges are written to).
        includes_own: Whether ``counted`` already counts this meter's charges.
        step_id: The agent step whose turns this meter charges ("" for the supervisor).
        attempt: That step's attempt.
        on_charge: Called with each charge after it is written (the supervisor counts it
            in the loop's totals); its failures are logged, never raised.
        slot: The session's call slot (held from the check to the charge when the session
            has a budget); None: calls are not serialized (a unit test's single thread).
    """

    def __init__(
        self,
        sid: str,
        ledger: CallLedger,
        *,
        budget: Callable[[], Budget],
        prices: Mapping[str, Any],
        counted: Callable[[], UsageByModel] = dict,
        includes_own: bool = False,
        step_id: str = "",
        attempt: int = 0,
        on_charge: Callable[[Charge], None] | None = None,
        slot: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        self.sid = sid
        self.ledger = ledger
        self.budget = budget
        self.prices = prices
        self.counted = counted
        self.includes_own = includes_own
        self.step_id = step_id
        self.attempt = attempt
        self.on_charge = on_charge
        self.slot = slot
        self.charges: list[Charge] = []  # what this meter charged, oldest first
        self._lock = threading.Lock()

    def spent(self) -> str | None:
        """Which budget is spent (counting this meter's charges), in words; None if none."""
        return self.budget().spent(spend_of(self.total(), self.prices))

    def total(self) -> UsageByModel:
        """What :attr:`counted` says, plus this meter's own charges (unless it has them)."""
        usage = {model: list(tokens) for model, tokens in list(self.counted().items())}
        if not self.includes_own:
            add_calls(usage, self.rows())
        return usage

    def rows(self) -> list[dict[str, Any]]:
        """This meter's charges as ``llm_calls`` rows, oldest first."""
        with self._lock:
            return [c.row() for c in self.charges]

    def check(self, role: str) -> None:
        """Refuse a call of ``role`` when the session's budget is spent.

        Raises:
            LLMBudgetSpentError: No call starts: the budget is spent.
        """
        spent = self.spent()
        if spent is not None:
            raise LLMBudgetSpentError(spent, session_id=self.sid, role=role)

    @contextmanager
    def metered(self, role: str) -> Iterator[None]:
        """Around one call, from its check to its charge: with a budget, the session's
        call slot is held, so no other call of the session starts before this one is
        charged (or failed).

        Raises:
            LLMBudgetSpentError: No call starts: the budget is spent.
        """
        limited = self.slot is not None and self.budget().limited
        with self.slot() if limited and self.slot is not None else nullcontext():
            self.check(role)
            yield

    def charge(
        self,
        role: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        latency_s: float,
        *,
        prompt: str | None = None,
        response: str | None = None,
    ) -> Charge:
        """Write one call to the ledger now, then count it (with its transcript, masked and
        cut by the caller, when given).

        A ledger that fails to write (the database is down) is logged and the call is still
        counted here, so the budget holds; the caller's answer is not lost over it.
        """
        charge = Charge(
            self.sid,
            role,
            model,
            prompt_tokens,
            completion_tokens,
            latency_s,
            self.step_id,
            self.attempt,
            prompt=prompt,
            response=response,
        )
        try:
            self.ledger.record_llm_call(charge)
        except Exception as exc:  # the record rides out faults; the spend must not vanish
            log.warning(
                "session=%s step=%s %s call of %d+%d tokens not recorded: %s",
                self.sid,
                self.step_id,
                role,
                prompt_tokens,
                completion_tokens,
                exc,
            )
        with self._lock:
            self.charges.append(charge)
        if self.on_charge is not None:
            try:
                self.on_charge(charge)
            except Exception:
                log.exception("session=%s on_charge failed", self.sid)
        return charge


# The meter of the session the current task or thread works for; None: calls are not
# charged here (the caller records their usage itself, as unit tests' twins do).
METER: contextvars.ContextVar[UsageMeter | None] = contextvars.ContextVar(
    "planloop_llm_meter", default=None
)


def current_meter() -> UsageMeter | None:
    """The meter of the current context, if any."""
    return METER.get()
