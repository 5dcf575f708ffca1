"""The session's deliberation: when a trigger fires, decide (LLM or rules) what to do.

The trigger policy says *when*; the decision agent (or, with no LLM configured, the rule
policy) says *what*, as a :class:`Verdict` the session loop carries out (session/changes.py)
through one freeze / prune / inject path. The deliberation reads the session's state and
never changes it; it keeps only its own memory (pending changes, constraints, hints).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from planloop.config.settings import Settings
from planloop.core.catalogue import SensitiveNames
from planloop.core.errors import LLMError
from planloop.core.llm_budget import Budget, spend_of
from planloop.core.models import Event, EventType, Severity, StepStatus
from planloop.core.tools import ToolRegistry
from planloop.planner.context import Compressor, outputs_key
from planloop.planner.decider import Decider
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.llm import ChatModel, Usage
from planloop.planner.plan import Plan
from planloop.planner.replans import Replanner
from planloop.planner.situation import EventView, Situation, StepView
from planloop.supervisor.session.decision_log import record_usage
from planloop.supervisor.session.limits import past_limits
from planloop.supervisor.session.policy import FAILURES, rule_verdict
from planloop.supervisor.session.replan_budget import ReplanBudget, spent_budget_verdict
from planloop.supervisor.session.replan_scope import ScopePick, pick_for_failures, pick_replan_scope
from planloop.supervisor.session.state import SessionState
from planloop.supervisor.session.triggers import TriggerConfig, trigger_reason
from planloop.supervisor.session.verdict import Decision, Verdict

log = logging.getLogger(__name__)

RECENT_EVENTS = 30
LoadOutputs = Callable[[list[str]], Awaitable[None]]
FetchLessons = Callable[[], Awaitable[list[str]]]


async def _loaded(step_ids: list[str]) -> None:
    return None


class Deliberation:
    """Pending context changes of one session, and what to do about them."""

    def __init__(
        self,
        state: SessionState,
        settings: Settings,
        chat: ChatModel | None,
        tools: ToolRegistry,
        sensitive: SensitiveNames,
        load_outputs: LoadOutputs = _loaded,
        *,
        fetch_lessons: FetchLessons | None = None,
    ) -> None:
        self.state = state
        self.settings = settings
        self.chat = chat
        self.tools = tools
        self.sensitive = sensitive
        self.load_outputs = load_outputs
        self.pending: list[Event] = []
        self.recent: list[Event] = []
        self.constraints: list[str] = []
        self.hints: list[str] = []
        self.failed_fingerprints: set[str] = set()
        self.subgraphs: list[tuple[str, frozenset[str]]] = []
        self.awaiting: list[Event] = []  # changes parked until a person approves an action
        # Advice from earlier sessions' lessons for every planning prompt; None until the
        # session has searched (then kept in memory(), so a takeover does not search again).
        self.lessons: list[str] | None = None
        self.fetch_lessons = fetch_lessons  # None: lessons off
        self.notes: dict[str, str] = {}  # completed outputs' key -> the compressor's notes

    @property
    def config(self) -> TriggerConfig:
        """The session's trigger settings (read when needed: options arrive with the load)."""
        settings, options = self.settings, self.state.info.options
        return TriggerConfig(
            batch_size=options.batch_react_size or settings.batch_react_size,
            react_severity=Severity(settings.react_severity),
            milestones=self.reviews_milestones,
        )

    @property
    def reviews_milestones(self) -> bool:
        """Whether a finished phase is reviewed: by the decision agent only (the rule
        policy has nothing to review), when the session or the settings ask for it."""
        chosen = self.state.info.options.milestone_reviews
        wanted = self.settings.milestone_reviews if chosen is None else chosen
        return wanted and self.chat is not None

    @property
    def max_replans(self) -> int:
        options = self.state.info.options
        return self.settings.max_replans if options.max_replans is None else options.max_replans

    def llm_budget_spent(self) -> str | None:
        """Which LLM budget (tokens, cost) the session has spent, if any: no call starts then."""
        budget = Budget.of(self.state.info.options, self.settings)
        return budget.spent(spend_of(self.state.fold_usage(), self.settings.llm_prices))

    def budget_verdict(self, spent: str) -> Verdict:
        """A spent budget: wait for a person (``approval_on_budget``), else a forced ABORT."""
        if self.settings.approval_on_budget:
            text = f"{spent}: waiting for a person"
            return Verdict(
                ReplanDecision(action=ReplanAction.CONTINUE, reasoning=text), "await_human"
            )
        text = f"{spent}: forced ABORT"
        return Verdict(
            ReplanDecision(action=ReplanAction.ABORT, reasoning=text, confidence=1.0), "budget"
        )

    # --- gathering ------------------------------------------------------------------------
    def note(self, event: Event) -> None:
        """A context change: keep it for the next decision."""
        if event.type == EventType.NEW_CONSTRAINT and event.description:
            self.constraints.append(event.description)
        if event.type in FAILURES:
            self._mark_failed_subgraphs(event.step_id)
        self.pending.append(event)
        self.recent = [*self.recent, event][-RECENT_EVENTS:]

    def _mark_failed_subgraphs(self, step_id: str) -> None:
        for fingerprint, ids in self.subgraphs:
            if step_id in ids:
                self.failed_fingerprints.add(fingerprint)
        remaining = [
            s
            for s in self.state.plan.steps
            if self.state.states[s.id].status != StepStatus.COMPLETED
        ]
        if remaining:
            self.failed_fingerprints.add(Plan(steps=remaining).fingerprint())

    def park(self, changes: list[Event]) -> None:
        """Keep ``changes`` until a person approves what to do about them."""
        self.awaiting += changes

    def requeue(self, changes: list[Event]) -> None:
        """``changes`` are still unresolved (a re-plan failed): the next trigger decides."""
        self.pending = [*changes, *self.pending]

    # --- deciding -------------------------------------------------------------------------
    async def maybe_decide(self, *, idle: bool) -> Decision | None:
        """A decision about the pending changes, if the trigger policy says decide now."""
        if not self.pending or self.state.outcome is not None:
            return None
        reason = trigger_reason(self.pending, self.config, idle=idle)
        if reason is None:
            return None
        changes, self.pending = self.pending, []
        verdict = await self._decide(reason, changes)
        self.hints += verdict.choice.new_context_hints
        return Decision(verdict, changes, reason)

    def approve(self, event: Event) -> Decision | None:
        """A person answered ``planloop approve``: their action on the parked changes."""
        if not self.awaiting:
            log.info("session=%s approval ignored: nothing is waiting for one", self.state.sid)
            return None
        action = ReplanAction(str(event.payload.get("action", "ABORT")).upper())
        text = f"approved by a person: {action.value}" + (
            f" ({event.description})" if event.description else ""
        )
        verdict = Verdict(ReplanDecision(action=action, reasoning=text, confidence=1.0), "human")
        changes, self.awaiting = self.awaiting, []
        self.hints += verdict.choice.new_context_hints
        return Decision(verdict, changes, "approval")

    async def _decide(self, reason: str, changes: list[Event]) -> Verdict:
        budget = ReplanBudget(
            self.state.info.replans, self.max_replans, self.settings.approval_on_budget
        )
        # the supervisor, not the decision agent, holds the budget: past it no model is asked
        spent = spent_budget_verdict(
            budget, changes, self.state.steps, planned_by_llm=self.chat is not None
        )
        if spent is not None:
            return spent
        limited = past_limits(self, changes)
        if limited is not None:
            return limited
        if self.chat is None:
            return self.rules(changes)
        await self.load_outputs(sorted(self.state.completed()))
        situation = await self.fitted_situation(reason)
        try:
            decision, usage = await asyncio.to_thread(
                Decider(self.chat).decide, situation, sensitive=self._sensitive()
            )
        except LLMError as exc:
            log.error(
                "session=%s decision agent failed, the rule policy decides: %s",
                self.state.sid,
                exc,
            )
            verdict = self.rules(changes)
            verdict.choice = verdict.choice.model_copy(
                update={
                    "reasoning": f"decision agent unavailable ({exc}); {verdict.choice.reasoning}"
                }
            )
            return verdict
        return Verdict(decision, "llm", [usage])

    def rules(self, changes: list[Event]) -> Verdict:
        """The rule policy's verdict, a re-plan taking the scope rule's pick."""
        return rule_verdict(changes, self.state.steps, self.scope)

    def scope(self, step_id: str) -> ScopePick:
        """The scope rule's pick (full or incremental) for a re-plan after ``step_id`` failed."""
        state = self.state
        return pick_replan_scope(state.plan, step_id, state.states, state.info.replans)

    def rules_for_time(self, changes: list[Event], note: str) -> Verdict:
        """The rule policy's verdict when the deadline leaves no time for an LLM call."""
        log.info("session=%s %s", self.state.sid, note)
        verdict = self.rules(changes)
        reasoning = f"{note}; {verdict.choice.reasoning}"
        verdict.choice = verdict.choice.model_copy(update={"reasoning": reasoning})
        verdict.deadline_note = note
        return verdict

    # --- re-planning ----------------------------------------------------------------------
    def to_cancel(self, decision: ReplanDecision, changes: list[Event]) -> set[str]:
        """Steps an LLM re-plan replaces: everything not completed (full), or the failed
        ones and those the decision names (remaining)."""
        steps, completed = self.state.steps, self.state.completed()
        if decision.action == ReplanAction.REPLAN_FULL:
            return {i for i in steps if i not in completed}
        failed = [e.step_id for e in changes if e.type in FAILURES and e.step_id in steps]
        return {*(c for c in decision.steps_to_cancel if c in steps), *failed} - completed

    async def replan(
        self, decision: ReplanDecision, cancel: set[str]
    ) -> tuple[Plan | None, list[Usage]]:
        """The LLM planner's next plan version (the cancelled steps already ended), or None
        when the re-planner added nothing: no step that is not already completed (the
        caller drops what the re-plan removes and goes on with what is left)."""
        assert self.chat is not None
        state = self.state
        planner = Replanner(self.chat, self.tools, max_repairs=self.settings.plan_max_repairs)
        completed = state.completed()
        await self.load_outputs(sorted(completed))
        lessons = await self.advice()
        situation = await self.fitted_situation(f"{decision.action.value}: {decision.reasoning}")
        if decision.action == ReplanAction.REPLAN_FULL:
            replan = await asyncio.to_thread(
                planner.replan_full,
                situation,
                state.plan,
                completed,
                failed_fingerprints=self.failed_fingerprints,
                lessons=lessons,
            )
        else:
            replan = await asyncio.to_thread(
                planner.replan_remaining,
                situation,
                state.plan,
                completed,
                failed_fingerprints=self.failed_fingerprints,
                cancel=cancel,
                lessons=lessons,
            )
        if replan.plan is None:  # an empty answer, or one that only repeats completed steps
            log.info("session=%s the re-planner added nothing", state.sid)
            return None, replan.usages
        self.subgraphs.append((replan.added_fingerprint(), replan.added))
        return replan.plan, replan.usages

    async def advice(self) -> list[str]:
        """The lessons' advice for planning prompts, searched once per session."""
        if self.lessons is None and self.fetch_lessons is not None:
            self.lessons = await self.fetch_lessons()
        return list(self.lessons or [])

    # --- the situation report -------------------------------------------------------------
    async def fitted_situation(self, trigger: str) -> Situation:
        """The situation for the decider and the re-planner: past ``context_max_chars`` of
        completed outputs, with the compressor's notes on them (its calls recorded here, so
        a decision that then fails still counts them)."""
        situation = self.situation(trigger)
        key = outputs_key(situation)
        if key in self.notes:  # the decider's notes serve the re-plan that follows
            return dataclasses.replace(situation, notes=self.notes[key])
        if self.chat is None or self.llm_budget_spent() is not None:
            return situation
        compressor = Compressor(self.chat)
        fitted, usages = await asyncio.to_thread(
            compressor.compress_situation, situation, self.settings.context_max_chars
        )
        record_usage(self.state.batch, usages)
        self.notes = {key: fitted.notes} if fitted.notes else {}
        return fitted

    def situation(self, trigger: str) -> Situation:
        state = self.state
        steps = tuple(
            StepView(
                id=s.id,
                tool=s.tool,
                title=s.title,
                status=state.states[s.id].status.value,
                attempts=state.states[s.id].attempt,
                error=state.states[s.id].error,
                output=state.outputs.get(s.id),
                dependencies=tuple(s.dependencies),
            )
            for s in state.plan.steps
        )
        events = tuple(
            EventView(e.type.value, e.severity.value, e.step_id, e.description) for e in self.recent
        )
        return Situation(
            goal=state.plan.goal or state.info.goal,
            constraints=tuple([*state.plan.constraints, *self.constraints]),
            steps=steps,
            events=events,
            replans_used=state.info.replans,
            max_replans=self.max_replans,
            trigger=trigger,
            down_tools=tuple(sorted(state.down_tools)),
            hints=tuple(self.hints),
            sensitive=frozenset(self._sensitive()),
            preview_above_bytes=self.settings.inline_value_max_bytes,
            scope_pick=self._scope_pick(),
        )

    def _scope_pick(self) -> str:
        """The scope rule's pick for the steps of the plan that failed, told to the decider."""
        state = self.state
        failed = [
            s.id
            for s in state.plan.steps
            if state.states[s.id].status in (StepStatus.FAILED, StepStatus.INTERRUPTED)
        ]
        pick = pick_for_failures(state.plan, failed, state.states, state.info.replans)
        return pick.reason if pick is not None else ""

    def _sensitive(self) -> set[str]:
        # the catalogue's too: this supervisor may not have imported every tool's module
        return set(self.sensitive.of_tools(step.tool for step in self.state.plan.steps))

    def memory(self) -> dict[str, Any]:
        """What must survive a supervisor crash (stored in the session hash)."""
        return {
            "pending": [e.model_dump(mode="json") for e in self.pending],
            "awaiting": [e.model_dump(mode="json") for e in self.awaiting],
            "constraints": self.constraints,
            "hints": self.hints,
            "failed_fingerprints": sorted(self.failed_fingerprints),
            "lessons": self.lessons,
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.pending = [Event.model_validate(e) for e in data.get("pending", [])]
        self.awaiting = [Event.model_validate(e) for e in data.get("awaiting", [])]
        self.constraints = list(data.get("constraints", []))
        self.hints = list(data.get("hints", []))
        self.failed_fingerprints = set(data.get("failed_fingerprints", []))
        lessons = data.get("lessons")
        self.lessons = list(lessons) if isinstance(lessons, list) else None
