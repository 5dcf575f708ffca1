"""Runs one step attempt: claim it, run the tool under its timeout, record the outcome.

No Celery here: the task in :mod:`workers.tasks` is a thin shell around :class:`StepExecutor`,
so the executor can be driven directly by tests and benchmarks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from planloop.core.effect_fence import AttemptFence
from planloop.core.errors import OutputTooLarge, PermanentToolError, ToolError, ToolTimeoutError
from planloop.core.hot_state import BreakerPolicy, HotState, dumps
from planloop.core.logs import bound
from planloop.core.masking import mask_text
from planloop.core.metrics import count_breaker, count_step
from planloop.core.models import ErrorKind, Event, EventType, Severity, StepStatus, StepTaskArgs
from planloop.core.receipts import receipts
from planloop.core.tools import EffectLedger, ToolContext, ToolRegistry, ToolSpec
from planloop.core.values import ValueLimits
from planloop.planner.answer_step import ANSWER_TOOL, AnswerParams
from planloop.planner.expect import check_expectations
from planloop.planner.plan import Expectation
from planloop.planner.react import ReactResult, ReactStopped, usage_payload
from planloop.planner.react_step import REACT_TOOL
from planloop.workers.outcomes import (
    DROPPED,
    Attempt,
    Outcome,
    classify_error,
    failed,
    tool_health,
    unavailable,
)
from planloop.workers.step_params import step_params
from planloop.workers.tool_threads import ToolThreads

log = logging.getLogger(__name__)

CLAIMED, BREAKER_OPEN, PROBE = 1, 2, 3  # the claim's answers that run (or fail fast)


class AgentSteps(Protocol):
    """Runs agent steps (workers/react.py): the ReAct loop over this worker's tools."""

    def run(self, args: StepTaskArgs, params: dict[str, Any]) -> ReactResult:
        """The loop's result; raises :class:`ReactStopped` when it ends without one."""
        ...


class StepExecutor:
    """Executes step attempts for one worker process."""

    def __init__(
        self,
        state: HotState,
        tools: ToolRegistry,
        effects: EffectLedger,
        worker: str,
        breaker: BreakerPolicy | None = None,
        limits: ValueLimits | None = None,
        late_effect_wait_s: float = 0.0,
    ) -> None:
        """``late_effect_wait_s``: how long a timed-out attempt waits for an effect already
        applying to commit, so its outcome follows the ledger row (core/effect_fence.py)."""
        self.agents: AgentSteps | None = None  # set when the worker has an LLM
        self.state = state
        self.limits = limits or ValueLimits()
        self.tools = tools
        self.effects = effects
        self.worker = worker
        self.breaker = breaker
        self.threads = ToolThreads()
        self.late_effect_wait_s = late_effect_wait_s

    def execute(self, args: StepTaskArgs, delivery_tag: str | None = None) -> Attempt:
        """Run one attempt end to end; returns what happened, for the task's Celery state.

        1. Claim the attempt and check the tool's circuit breaker, in one round trip (a
           stale or duplicate delivery stops here; an open breaker fails fast).
        2. Run the tool on a thread, waiting at most the step's timeout; at the timeout the
           attempt's fence closes: the abandoned call applies no effect (core/effect_fence.py).
        3. Classify the result (workers/outcomes.py): completed, unexpected, failed
           (transient/permanent), timed out, or interrupted by a store fault.
        4. Record the outcome, count it on the breaker and append its event, in one atomic
           Redis call.

        The message that brought the attempt (``delivery_tag``) is written back to the
        broker's unacked entries by the claim and acknowledged by the outcome, inside the
        same two calls (core/receipts.py).
        """
        with bound(args.session_id, args.step_id):  # JSON log lines name session and step
            return self._execute(args, delivery_tag)

    def _execute(self, args: StepTaskArgs, delivery_tag: str | None) -> Attempt:
        sid, step = args.session_id, args.step_id
        receipt = receipts.parked(delivery_tag) if delivery_tag else None
        claim = self.state.start_attempt(
            sid,
            step,
            attempt=args.attempt,
            epoch=args.epoch,
            worker=self.worker,
            tool=args.tool,
            breaker=self.breaker,
            receipt=receipt,
        )
        if receipt:
            receipts.held(receipt.tag)
        if claim not in (CLAIMED, BREAKER_OPEN, PROBE):
            why = "already started elsewhere" if claim < 0 else "stale"
            log.info("session=%s step=%s attempt=%d dropped: %s", sid, step, args.attempt, why)
            return DROPPED
        started = time.time()
        outcome = unavailable(args.tool) if claim == BREAKER_OPEN else self._run(args)
        finished = time.time()
        severity = self._severity(args, outcome)
        event = Event(
            type=outcome.event,
            severity=severity,
            step_id=step,
            attempt=args.attempt,
            description=outcome.error or f"{args.tool} finished",
            payload={
                "worker": self.worker,
                "started_at": started,
                "finished_at": finished,
                "error_kind": outcome.error_kind,
                **outcome.payload,
            },
            occurred_at=finished,
        )
        recorded = self.state.record_outcome(
            sid,
            step,
            attempt=args.attempt,
            epoch=args.epoch,
            status=outcome.status.value,
            event=event,
            output=outcome.output,
            output_json=outcome.encoded,
            error=outcome.error,
            error_kind=outcome.error_kind,
            tool=args.tool,
            breaker=self.breaker,
            tool_ok=_counted(claim, tool_health(outcome)),
            receipt=receipt,
            finished_at=finished,
        )
        if receipt:
            receipts.settle(receipt.tag)
        overhead = started - args.dispatched_at if args.dispatched_at else None
        count_step(args.tool, outcome.status.value, finished - started, overhead)
        if claim == BREAKER_OPEN or outcome.status == StepStatus.COMPLETED:
            count_breaker(args.tool, claim == BREAKER_OPEN)
        log.info(
            "session=%s step=%s attempt=%d %s in %.3fs%s",
            sid,
            step,
            args.attempt,
            outcome.status.value,
            finished - started,
            "" if recorded else " (outcome dropped: attempt is stale)",
        )
        if not recorded:
            return DROPPED
        return Attempt(outcome.status.value, outcome.error, outcome.error_kind)

    def _run(self, args: StepTaskArgs) -> Outcome:
        if args.tool == REACT_TOOL:
            return self._run_agent(args)
        if args.tool == ANSWER_TOOL:
            return self._run_answer(args)
        try:
            spec = self.tools.get(args.tool)
        except ToolError as exc:
            # not a bad attempt but a deployment gap: the session must not end "completed"
            return failed(exc, ErrorKind.UNSERVED)
        try:
            params = self._params(args)
        except ToolError as exc:  # too big: permanent; gone from Redis: sent again on retry
            return failed(exc, classify_error(exc))
        try:
            return self._call(spec, args, params)
        except Exception as exc:
            # Something around the tool broke (a timeout_s of 1e300 overflows the wait):
            # an attempt without an outcome would stay running forever, so it fails for good.
            log.exception(
                "session=%s step=%s attempt=%d could not run",
                args.session_id,
                args.step_id,
                args.attempt,
            )
            return failed(exc, ErrorKind.PERMANENT)

    def _run_answer(self, args: StepTaskArgs) -> Outcome:
        """An answer step: its resolved params are its output (the session's answer)."""
        try:
            answer = AnswerParams.model_validate(self._params(args))
        except ToolError as exc:  # params too big, or gone from Redis
            return failed(exc, classify_error(exc))
        except ValueError as exc:  # a reference resolved to something that is not text
            return failed(exc, ErrorKind.PERMANENT)
        return self._completed(args, answer.model_dump(mode="json"))

    def _run_agent(self, args: StepTaskArgs) -> Outcome:
        """An agent step: the ReAct loop (workers/react.py); its LLM usage rides on the
        event, so the session's budget counts it whether the step completes or not."""
        if self.agents is None:
            missing = PermanentToolError(
                "agent steps need an LLM: set PLANLOOP_LLM_BASE_URL for the workers too"
            )
            return failed(missing, ErrorKind.PERMANENT)
        try:
            params = self._params(args)
            result = self.agents.run(args, params)
        except ToolError as exc:  # params too big, or gone from Redis
            return failed(exc, classify_error(exc))
        except ReactStopped as exc:
            usage = usage_payload(exc.usages)
            stopped = failed(exc.cause, classify_error(exc.cause))
            return replace(stopped, payload={"llm_usage": usage})
        completed = self._completed(args, result.output())
        return replace(completed, payload={"llm_usage": usage_payload(result.usages)})

    def _params(self, args: StepTaskArgs) -> dict[str, Any]:
        return step_params(args, self.state, self.limits)

    def _call(self, spec: ToolSpec, args: StepTaskArgs, params: dict[str, Any]) -> Outcome:
        ctx = ToolContext(
            session_id=args.session_id,
            step_id=args.step_id,
            attempt=args.attempt,
            idempotency_key=args.idempotency_key,
            effects=self.effects,
            fence=AttemptFence(args.step_id, args.attempt),
        )
        call = self.threads.submit(partial(spec.run, params, ctx))
        try:
            failure = call.exception(args.timeout_s)  # a tool's own exception is returned
        except TimeoutError:
            # from now on its effects are refused (core/effect_fence.py)
            if ctx.fence.close(self.late_effect_wait_s):
                log.warning(
                    "session=%s step=%s attempt=%d timed out while an effect was applying: "
                    "it may commit late, under the step's key",
                    args.session_id,
                    args.step_id,
                    args.attempt,
                )
            return failed(ToolTimeoutError(args.tool, args.timeout_s), ErrorKind.TIMEOUT)
        if failure is not None:
            return failed(failure, classify_error(failure, spec.non_retryable))
        return self._completed(args, call.result())

    def _completed(self, args: StepTaskArgs, output: Any) -> Outcome:
        """A returned output: too big (failed), missing an expectation, or completed."""
        encoded = dumps(output)
        if len(encoded) > self.limits.max_bytes:
            too_big = OutputTooLarge(
                args.step_id, "output", size=len(encoded), limit=self.limits.max_bytes
            )
            return failed(too_big, ErrorKind.PERMANENT)
        misses = check_expectations([Expectation.model_validate(e) for e in args.expect], output)
        if misses:
            return Outcome(
                StepStatus.COMPLETED,
                EventType.TASK_UNEXPECTED_RESULT,
                output,
                mask_text("; ".join(misses)),
                "",
                encoded,
            )
        return Outcome(StepStatus.COMPLETED, EventType.TASK_COMPLETED, output, encoded=encoded)

    @staticmethod
    def _severity(args: StepTaskArgs, outcome: Outcome) -> Severity:
        if outcome.event == EventType.TASK_COMPLETED:
            return Severity.INFO
        return Severity.CRITICAL if args.critical else Severity.WARNING


def _counted(claim: int, tool_ok: bool | None) -> bool | None:
    """What the outcome counts on the tool's breaker (None: nothing). A success of a call
    claimed while the breaker was closed leaves it alone (a breaker read and a command
    fewer per step): only the half-open trial's success closes an open breaker, and one
    that opened meanwhile waits for its own trial."""
    return None if tool_ok and claim == CLAIMED else tool_ok
