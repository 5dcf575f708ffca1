"""Agent steps in a worker: the ReAct loop of :mod:`planner.react`, its tool calls run like
steps.

Each tool call the loop makes goes through what a step's call goes through: the tool's
params model (:meth:`core.tools.ToolSpec.run`), a timeout (the tool's own, else the default
step timeout, never past the agent step's deadline), the tool's circuit breaker (checked
before, counted after, shared with every worker), a fence its timeout closes
(core/effect_fence.py) and the effect ledger, under the idempotency key
``{step key}:react:{turn}``. ``turn`` is the first turn of the attempt that made the same
call (the same tool with the same params): a model that calls again after a timeout reuses
the first call's key, so the write is applied once and the second call reads its receipt
(a retried attempt whose model makes the same write in the same turn finds it too). A
failed call is an observation the model reads, never the step's failure, unless the loop
stalls on it (planner/react_stall.py, thresholds from the settings): params that do not fit
count as a refused call. A store that refuses the ledger's write is not the tool's failure:
it stops the attempt (``STORE``), to run again once the store recovers. Every turn is
streamed as a ``react_iteration`` progress note for ``watch``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from planloop.config.settings import Settings
from planloop.core.effect_fence import AttemptFence
from planloop.core.errors import (
    LLMBudgetSpentError,
    PermanentToolError,
    SessionNotFoundError,
    StoreWriteError,
    ToolParamsError,
    ToolTimeoutError,
    UnknownToolError,
)
from planloop.core.hot_state import BreakerPolicy, HotState
from planloop.core.llm_budget import Budget, UsageByModel, add_calls, reconcile, spend_of
from planloop.core.llm_meter import METER, CallLedger, UsageMeter
from planloop.core.llm_slot import session_slot
from planloop.core.masking import error_text, mask, mask_text
from planloop.core.models import ErrorKind, SessionOptions, SessionRecord, StepTaskArgs
from planloop.core.tools import EffectLedger, ToolContext, ToolRegistry
from planloop.planner.llm import ChatModel, Usage
from planloop.planner.react import (
    Iteration,
    Observation,
    ReactAgent,
    ReactResult,
    ReactStopped,
    ReactTask,
    usage_payload,
)
from planloop.planner.react_stall import StallRules
from planloop.planner.react_step import REACT_TOOL, ReactParams
from planloop.workers.outcomes import classify_error
from planloop.workers.tool_threads import ToolThreads

log = logging.getLogger(__name__)

NOTE_CHARS = 300  # of a thought or an observation in a progress note
REACT_NOTE = "react_iteration"  # the progress kind of one turn


@dataclass
class AgentStepRunner:
    """Runs agent steps for one worker process (the executor hands them over)."""

    chat: ChatModel
    state: HotState
    tools: ToolRegistry
    effects: EffectLedger
    threads: ToolThreads
    breaker: BreakerPolicy | None
    settings: Settings  # budgets' defaults and the price table
    # Where each turn's call is charged as it arrives (the SQL record; None: not metered,
    # the turns' usage rides on the event only).
    ledger: CallLedger | None = None

    def run(self, args: StepTaskArgs, params: dict[str, Any]) -> ReactResult:
        """Run the agent step of ``args`` (its ``params`` resolved) to its final answer.

        Before each turn the step's deadline and the session's LLM budgets (what the
        session hash and the ledger say was spent, plus this loop's calls) are checked: no
        model call starts past either. Each call is charged to the session's ledger, with
        the step and attempt, as its answer arrives (core/llm_meter.py), so an attempt
        whose worker dies loses none of its spend; the event carries the same calls marked
        recorded, for the supervisor's running totals.

        Raises:
            ReactStopped: The loop ended without an answer (turn budget, deadline, LLM
                budget, model, params the worker cannot run).
        """
        deadline = time.monotonic() + args.timeout_s
        try:
            task = self._task(args, params)
        except Exception as exc:
            raise ReactStopped(exc, []) from exc
        spent: list[Usage] = []
        meter = self._meter(args)

        def before_turn() -> None:
            if time.monotonic() >= deadline:
                raise ToolTimeoutError(REACT_TOOL, args.timeout_s)
            budget = self._budget_spent(args.session_id, spent, meter)
            if budget is not None:
                raise PermanentToolError(f"{budget}: the agent step stops before its next turn")

        def on_iteration(it: Iteration) -> None:
            spent.append(it.usage)
            self._note(args, it)

        token = METER.set(meter)
        first_turns: dict[str, int] = {}  # a call's canonical text -> its first turn
        try:
            result = ReactAgent(self.chat).run(
                task,
                partial(self._call, args, deadline, first_turns),
                on_iteration=on_iteration,
                before_turn=before_turn,
            )
        except ReactStopped as exc:
            if meter is None:
                raise
            if isinstance(exc.cause, LLMBudgetSpentError):  # the client refused the call
                cause: BaseException = PermanentToolError(
                    f"{exc.cause.spent}: the agent step stops before its next turn"
                )
            else:
                cause = exc.cause
            raise ReactStopped(cause, exc.iterations, _charged(meter)) from exc.cause
        finally:
            METER.reset(token)
        return result if meter is None else replace(result, charged=_charged(meter))

    def _meter(self, args: StepTaskArgs) -> UsageMeter | None:
        """The meter of one attempt's calls, when there is a ledger to charge them to."""
        if self.ledger is None:
            return None
        sid, ledger = args.session_id, self.ledger

        def budget() -> Budget:
            options = self._record(sid)
            return Budget.of(options.options if options else SessionOptions(), self.settings)

        def counted() -> UsageByModel:
            # What the supervisor counted (session hash) plus this attempt's calls, and
            # what the ledger recorded (every process's calls, this attempt's included):
            # each may lag the other, neither counts a call twice.
            record = self._record(sid)
            hashed = {m: list(t) for m, t in (record.llm_usage if record else {}).items()}
            add_calls(hashed, meter.rows())
            return reconcile(hashed, ledger.usage_of(sid))

        meter = UsageMeter(
            sid,
            ledger,
            budget=budget,
            prices=self.settings.llm_prices,
            counted=counted,
            includes_own=True,
            step_id=args.step_id,
            attempt=args.attempt,
            slot=session_slot(self.settings, sid, self.state.r),
        )
        return meter

    def _record(self, sid: str) -> SessionRecord | None:
        try:
            return self.state.session(sid)
        except SessionNotFoundError:
            return None

    def _budget_spent(self, sid: str, turns: list[Usage], meter: UsageMeter | None) -> str | None:
        """The session's spent LLM budget counting this loop's calls, if any (None also
        when the session hash is gone: the supervisor decides about that)."""
        record = self._record(sid)
        if record is None:
            return None
        if meter is not None:
            return meter.spent()
        usage = {model: list(tokens) for model, tokens in record.llm_usage.items()}
        add_calls(usage, usage_payload(turns))
        budget = Budget.of(record.options, self.settings)
        return budget.spent(spend_of(usage, self.settings.llm_prices))

    def _task(self, args: StepTaskArgs, params: dict[str, Any]) -> ReactTask:
        parsed = ReactParams.model_validate(params)
        specs = []
        for name in parsed.tools:
            if name not in self.tools:
                raise UnknownToolError(name, self.tools.names())
            specs.append(self.tools.get(name))
        return ReactTask(
            step_id=args.step_id,
            instruction=args.instruction,
            tools=specs,
            max_iterations=parsed.max_iterations,
            context=parsed.context,
            stall=StallRules(
                repeats=self.settings.react_stall_repeats,
                refusals=self.settings.react_stall_refusals,
            ),
        )

    def _call(
        self,
        args: StepTaskArgs,
        deadline: float,
        first_turns: dict[str, int],
        turn: int,
        tool: str,
        params: dict[str, Any],
    ) -> Observation:
        """One tool call of turn ``turn``, run like a step's; its outcome as an observation.

        Raises:
            StoreWriteError: The effect ledger refused the write: the attempt stops.
        """
        spec = self.tools.get(tool)
        if not self.state.breaker_allows(tool, self.breaker):
            return Observation(False, error=f"tool {tool!r} is unavailable: its breaker is open")
        keyed = first_turns.setdefault(call_text(tool, params), turn)
        ctx = ToolContext(
            session_id=args.session_id,
            step_id=args.step_id,
            attempt=args.attempt,
            idempotency_key=f"{args.idempotency_key}:react:{keyed}",
            effects=self.effects,
            fence=AttemptFence(args.step_id, args.attempt),
        )
        timeout = min(
            spec.timeout_s or self.settings.default_step_timeout_s, deadline - time.monotonic()
        )
        call = self.threads.submit(partial(spec.run, params, ctx))
        late = ""
        try:
            failure = call.exception(max(timeout, 0.001))
        except TimeoutError:
            failure = ToolTimeoutError(tool, max(timeout, 0.0))
            applying = ctx.fence.close(self.settings.watchdog_grace_s / 2)
            late = _late_write(applying) if spec.side_effect == "write" else ""
        if isinstance(failure, StoreWriteError):
            raise failure
        kind = classify_error(failure, spec.non_retryable) if failure is not None else None
        if kind in (None, ErrorKind.TRANSIENT, ErrorKind.TIMEOUT):  # bad params say nothing
            self.state.count_on_breaker(tool, self.breaker, ok=failure is None)
        if failure is not None:
            # params that do not fit never reached the tool: a refusal, like an unknown tool
            refused = isinstance(failure, ToolParamsError)
            error = f"{type(failure).__name__}: {error_text(failure)}{late}"
            return Observation(False, error=error, refused=refused)
        return Observation(True, mask(call.result()))

    def _note(self, args: StepTaskArgs, it: Iteration) -> None:
        """Stream one turn for ``watch`` (never needed for correctness: a lost note is fine)."""
        seen = it.observation
        fields = {
            "step": args.step_id,
            "attempt": str(args.attempt),
            "iteration": str(it.number),
            "thought": _cut(mask_text(it.thought)),
            "tool": it.tool or "",
            "final": "1" if it.tool is None else "0",
            "ok": "" if seen is None else ("1" if seen.ok else "0"),
            "observation": "" if seen is None else _cut(seen.text(NOTE_CHARS * 2)),
            "prompt_tokens": str(it.usage.prompt_tokens),
            "completion_tokens": str(it.usage.completion_tokens),
        }
        try:
            self.state.note_progress(args.session_id, REACT_NOTE, fields)
        except Exception as exc:  # a note is never worth failing the step over
            log.warning(
                "session=%s step=%s turn %d not streamed: %s",
                args.session_id,
                args.step_id,
                it.number,
                exc,
            )


def _charged(meter: UsageMeter) -> list[Usage]:
    """The meter's charges as :class:`Usage` (recorded: the supervisor only counts them)."""
    return [
        Usage(c.prompt_tokens, c.completion_tokens, c.latency_s, c.model, c.role, recorded=True)
        for c in meter.charges
    ]


def _late_write(applying: bool) -> str:
    """What a timed-out write's observation adds: whether its write still lands."""
    if applying:  # it commits under the call's key: the same call again reads its receipt
        return "; its write was already being applied and may land: the same call reads it"
    return "; no write of it is left to land (one it makes from now on is refused)"


def call_text(tool: str, params: dict[str, Any]) -> str:
    """A tool call as canonical text: the same tool with the same params reads the same."""
    return json.dumps([tool, params], sort_keys=True, separators=(",", ":"), default=str)


def _cut(text: str) -> str:
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 3] + "..."
