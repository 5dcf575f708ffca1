"""The state one session loop owns: plan, step states, what to checkpoint next, the outcome.

One dataclass, so every decision of the loop (which steps are ready, how a failure settles,
what a new plan version changes, whether the session has ended) is a function of it that a
unit test can build and call without Redis.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from planloop.core.llm_budget import UsageByModel, add_calls
from planloop.core.llm_meter import UsageMeter
from planloop.core.models import ErrorKind, SessionRecord, SessionStatus, StepState, StepStatus
from planloop.core.record import Checkpoint
from planloop.planner.plan import Plan, Step
from planloop.supervisor.session.candidates import Candidates

FINAL = "final"  # a step's note once a failure is settled for good in its plan version
OPEN = (StepStatus.PENDING, StepStatus.READY)


def has_ended(st: StepState) -> bool:
    """True when nothing more will happen to the step in this plan version."""
    if st.status in (StepStatus.COMPLETED, StepStatus.SKIPPED, StepStatus.CANCELLED):
        return True
    return st.status in (StepStatus.FAILED, StepStatus.INTERRUPTED) and st.note == FINAL


@functools.cache
def placeholder_plan() -> Plan:
    """The plan a session has before its own is loaded (or when none ever loads): one
    shared instance, never changed (a plan version is immutable), validated once rather
    than per session taken."""
    return Plan(steps=[Step(id="_", tool="_")])


@dataclass
class SessionState:
    """One owned session: its plan version, step states, pending batch and outcome."""

    sid: str
    epoch: int
    info: SessionRecord = field(init=False)
    plan: Plan = field(default_factory=placeholder_plan)
    steps: dict[str, Step] = field(default_factory=dict)
    states: dict[str, StepState] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    down_tools: set[str] = field(default_factory=set)
    # What the next checkpoint writes to SQL, and the stream entries it acknowledges.
    batch: Checkpoint = field(default_factory=Checkpoint)
    dirty: set[str] = field(default_factory=set)
    acks: list[str] = field(default_factory=list)
    outcome: tuple[SessionStatus, str] | None = None
    approved: set[str] = field(default_factory=set)  # steps a person approved
    awaiting_approval: set[str] = field(default_factory=set)  # found waiting, not announced
    announced: set[str] = field(default_factory=set)
    # Scheduling indexes, so one loop turn costs what changed, not the plan's size.
    order: dict[str, int] = field(default_factory=dict)
    dependents: dict[str, list[str]] = field(default_factory=dict)
    candidates: Candidates = field(init=False)  # may be dispatchable; re-checked on use
    inflight: set[str] = field(default_factory=set)  # dispatched by us; pruned lazily
    backing_off: set[str] = field(default_factory=set)  # READY, waiting out a back-off
    # LLM tokens per model spent so far (on a takeover: the session hash reconciled with
    # the ledger); calls still in the batch are added by fold_usage, the calls this loop's
    # meter charged (written to the ledger as they arrived) by usage_total.
    llm_usage: UsageByModel = field(default_factory=dict)
    folded_calls: int = 0  # how many of batch.llm_calls llm_usage already counts
    metered: UsageMeter | None = None  # this loop's meter (core/llm_meter.py), if any
    # failed step -> the ids of the fallback steps injected in its place (by this owner;
    # a takeover forgets it, and the ending then only says the session went around it)
    fallbacks: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.info = SessionRecord(id=self.sid)
        self.candidates = Candidates(self.order)

    def end(self, status: SessionStatus, reason: str) -> None:
        """Set the outcome unless one is set already: the first reason to end wins."""
        if self.outcome is None:
            self.outcome = (status, reason)

    def use_plan(self, plan: Plan) -> None:
        """Run ``plan`` from here on; step states are kept (see :meth:`reindex`)."""
        self.plan = plan
        self.steps = {s.id: s for s in plan.steps}
        self.order = {s.id: i for i, s in enumerate(plan.steps)}
        self.dependents = {s.id: [] for s in plan.steps}
        for step in plan.steps:
            for dep in step.dependencies:
                self.dependents.setdefault(dep, []).append(step.id)

    def reindex(self) -> None:
        """Rebuild the scheduling indexes from the step states (after load or re-plan)."""
        self.candidates = Candidates(
            self.order, (i for i, st in self.states.items() if st.status in OPEN)
        )
        self.inflight = {i for i, st in self.states.items() if st.status == StepStatus.RUNNING}
        self.backing_off = {i for i, st in self.states.items() if st.status == StepStatus.READY}

    def running(self) -> int:
        """How many dispatched attempts have not ended."""
        self.inflight = {
            i
            for i in self.inflight
            if i in self.states and self.states[i].status == StepStatus.RUNNING
        }
        return len(self.inflight)

    def running_attempts(self) -> dict[str, int]:
        """Step id -> attempt of what we dispatched and has not ended."""
        self.running()
        return {i: self.states[i].attempt for i in self.inflight}

    def completed(self) -> set[str]:
        return {i for i, st in self.states.items() if st.status == StepStatus.COMPLETED}

    def fold_usage(self) -> UsageByModel:
        """Every LLM call spent so far (into the batch, charged by the meter, reported by
        agent steps; by any role) counted per model. Event loop only."""
        add_calls(self.llm_usage, self.batch.llm_calls[self.folded_calls :])
        self.folded_calls = len(self.batch.llm_calls)
        if self.metered is None:
            return self.llm_usage
        total = {model: list(tokens) for model, tokens in self.llm_usage.items()}
        add_calls(total, self.metered.rows())
        return total

    def unmetered_usage(self) -> UsageByModel:
        """What :meth:`fold_usage` counts except the meter's charges, without changing
        anything: the meter reads it from the threads its calls run in."""
        total = {model: list(tokens) for model, tokens in list(self.llm_usage.items())}
        add_calls(total, self.batch.llm_calls[self.folded_calls :])
        return total

    def take_decisions(self) -> Checkpoint:
        """The decisions and LLM calls recorded so far, as a checkpoint of their own (it
        acknowledges no event); the batch goes on with the rest."""
        self.fold_usage()
        taken = Checkpoint(decisions=self.batch.decisions, llm_calls=self.batch.llm_calls)
        self.batch.decisions, self.batch.llm_calls, self.folded_calls = [], [], 0
        return taken

    def take_checkpoint(self) -> tuple[Checkpoint, list[str]]:
        """What the next checkpoint writes and acknowledges; a new batch starts."""
        self.fold_usage()
        batch, self.batch, self.folded_calls = self.batch, Checkpoint(), 0
        dirty, self.dirty = sorted(self.dirty), set()
        acks, self.acks = self.acks, []
        for step_id in dirty:
            st = self.states.get(step_id)
            # READY/PENDING is the step between attempts: the attempt's own row (written
            # when its outcome arrived) already says how it ended.
            if st is not None and st.status not in OPEN:
                batch.attempts.append(attempt_row(step_id, st))
        return batch, acks


def session_end(
    state: SessionState, default_deadline_s: float | None, *, deliberating: bool, now: float
) -> tuple[SessionStatus, str] | None:
    """How the session ends now, if it does: past its deadline, or every step has ended and
    nothing is left to decide."""
    if state.outcome is not None:
        return None
    deadline = state.info.options.deadline_s or default_deadline_s
    if deadline and now > state.info.started_at + deadline:
        return (
            SessionStatus.FAILED,
            f"session deadline of {deadline:g}s passed; partial results kept",
        )
    if state.candidates or state.running():
        return None  # cheap exit while work is obviously left
    if deliberating or not all(has_ended(s) for s in state.states.values()):
        return None
    failed = [
        i
        for i, s in state.states.items()
        if s.status in (StepStatus.FAILED, StepStatus.INTERRUPTED)
    ]
    unserved = [i for i in failed if state.states[i].error_kind == ErrorKind.UNSERVED]
    if unserved:  # a tool no worker serves is the deployment's gap, not a finished session
        steps = state.plan.by_id
        tools = sorted({steps[i].tool for i in unserved if i in steps})
        return (
            SessionStatus.FAILED,
            f"no worker serves {', '.join(tools) or 'the tool'} (steps {', '.join(unserved)}); "
            "start a worker whose PLANLOOP_TOOL_MODULES provides it and submit again",
        )
    unstored = [i for i in failed if state.states[i].error_kind == ErrorKind.STORE]
    if unstored:  # writes the store never took: not a session that completed around them
        return (
            SessionStatus.FAILED,
            f"the effect ledger refused the writes of steps {', '.join(unstored)} past "
            "PLANLOOP_STORE_RETRY_LIMIT attempts; free the database's disk (or its lock) "
            "and submit the goal again",
        )
    return (SessionStatus.COMPLETED, completed_note(state, failed))


def completed_note(state: SessionState, failed: list[str]) -> str:
    """What a completed session says about its failed steps: whose fallback took over
    (every fallback step completed), and which were only worked around."""
    covered = [
        i
        for i in failed
        if state.fallbacks.get(i)
        and all(
            f in state.states and state.states[f].status == StepStatus.COMPLETED
            for f in state.fallbacks[i]
        )
    ]
    others = [i for i in failed if i not in covered]
    parts = [f"completed around failed steps: {', '.join(others)}"] if others else []
    if covered:
        parts.append(f"the fallback of {', '.join(covered)} took over")
    return "; ".join(parts)


def attempt_row(step_id: str, st: StepState) -> dict[str, Any]:
    """An attempt's SQL row; the checkpointer fills in a completed attempt's output."""
    row = st.model_dump(
        include={
            "epoch",
            "worker",
            "dispatched_at",
            "started_at",
            "finished_at",
            "error",
            "error_kind",
            "output_ref",
        }
    )
    return {
        "step_id": step_id,
        "attempt": st.attempt,
        "status": st.status.value,
        **row,
        "output": None,
    }
