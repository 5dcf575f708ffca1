"""The session's deliberation: when a trigger fires, decide (LLM or rules) and carry it out.

The trigger policy says *when*; the decision agent (or, with no LLM configured, the rule
policy) says *what*; the supervisor enforces the re-plan budget and executes the decision
through one freeze / prune / inject path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import LLMError, PlanError
from core.models import Event, EventType, SessionStatus, Severity, StepStatus
from planner.agents import Decider, Planner
from planner.decision import ReplanAction, ReplanDecision
from planner.llm import ChatModel, Usage
from planner.merge import inject_fallback, merge_remaining, replace_remaining
from planner.plan import Plan
from planner.situation import EventView, Situation, StepView
from planner.validation import validate_plan
from supervisor.triggers import TriggerConfig, trigger_reason

if TYPE_CHECKING:
    from supervisor.session import SessionRunner

log = logging.getLogger(__name__)

FAILURES = (EventType.TASK_FAILED, EventType.TASK_INTERRUPTED)
RECENT_EVENTS = 30


@dataclass
class Verdict:
    """A decision with where it came from."""

    decision: ReplanDecision
    source: str  # "llm", "rule", "budget" or "human"
    usages: list[Usage] = field(default_factory=list)
    fail_session: bool = False  # the rule policy's answer to a critical failure


class Deliberation:
    """Pending context changes of one session, and what to do about them."""

    def __init__(self, runner: SessionRunner, chat: ChatModel | None) -> None:
        self.runner = runner
        self.chat = chat
        self.pending: list[Event] = []
        self.recent: list[Event] = []
        self.constraints: list[str] = []
        self.hints: list[str] = []
        self.failed_fingerprints: set[str] = set()
        self.subgraphs: list[tuple[str, frozenset[str]]] = []
        self.awaiting: list[Event] = []  # changes parked until a person approves an action

    @property
    def config(self) -> TriggerConfig:
        """The session's trigger settings (read when needed: options arrive with the load)."""
        settings, options = self.runner.settings, self.runner.info.options
        return TriggerConfig(
            batch_size=options.batch_react_size or settings.batch_react_size,
            react_severity=Severity(settings.react_severity),
            milestones=settings.milestone_reviews,
        )

    @property
    def max_replans(self) -> int:
        options = self.runner.info.options
        return (
            self.runner.settings.max_replans if options.max_replans is None else options.max_replans
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
            for s in self.runner.plan.steps
            if self.runner.states[s.id].status != StepStatus.COMPLETED
        ]
        if remaining:
            self.failed_fingerprints.add(Plan(steps=remaining).fingerprint())

    # --- deciding -------------------------------------------------------------------------
    async def maybe_decide(self, *, idle: bool) -> None:
        """Decide about the pending changes if the trigger policy says so."""
        if not self.pending or self.runner.outcome is not None:
            return
        reason = trigger_reason(self.pending, self.config, idle=idle)
        if reason is None:
            return
        changes, self.pending = self.pending, []
        verdict = await self._decide(reason, changes)
        self._record(reason, verdict)
        await self._execute(verdict, changes, reason)

    async def _decide(self, reason: str, changes: list[Event]) -> Verdict:
        runner = self.runner
        if runner.info.replans >= self.max_replans and runner.settings.approval_on_budget:
            spent = f"{runner.info.replans}/{self.max_replans}"
            text = f"re-plan budget spent ({spent}): waiting for a person"
            return Verdict(
                ReplanDecision(action=ReplanAction.CONTINUE, reasoning=text), "await_human"
            )
        if runner.info.replans >= self.max_replans:
            text = f"re-plan budget spent ({runner.info.replans}/{self.max_replans}): forced ABORT"
            return Verdict(
                ReplanDecision(action=ReplanAction.ABORT, reasoning=text, confidence=1.0), "budget"
            )
        if self.chat is None:
            return self._rule_verdict(changes)
        await runner.load_outputs(
            [i for i, st in runner.states.items() if st.status == StepStatus.COMPLETED]
        )
        situation = self.situation(reason)
        try:
            decision, usage = await asyncio.to_thread(
                Decider(self.chat).decide, situation, sensitive=self._sensitive()
            )
        except LLMError as exc:
            log.error(
                "session=%s decision agent failed, the rule policy decides: %s", runner.sid, exc
            )
            verdict = self._rule_verdict(changes)
            verdict.decision = verdict.decision.model_copy(
                update={
                    "reasoning": f"decision agent unavailable ({exc}); {verdict.decision.reasoning}"
                }
            )
            return verdict
        return Verdict(decision, "llm", [usage])

    def _rule_verdict(self, changes: list[Event]) -> Verdict:
        """No LLM configured: fallback sub-graph → skip a non-critical branch → fail."""
        for event in changes:
            if event.type not in FAILURES or event.step_id not in self.runner.steps:
                continue
            step = self.runner.steps[event.step_id]
            if step.fallback:
                text = (
                    f"rule policy (no LLM configured): {step.id} failed for good; "
                    "inject its fallback"
                )
                return Verdict(
                    ReplanDecision(
                        action=ReplanAction.REPLAN_REMAINING,
                        reasoning=text,
                        steps_to_cancel=[],
                        confidence=1.0,
                    ),
                    "rule",
                )
            if step.critical:
                text = (
                    f"rule policy (no LLM configured): critical step {step.id} failed: "
                    f"{event.description}"
                )
                return Verdict(
                    ReplanDecision(action=ReplanAction.ABORT, reasoning=text, confidence=1.0),
                    "rule",
                    fail_session=True,
                )
        kinds = ", ".join(sorted({e.type.value for e in changes}))
        text = f"rule policy (no LLM configured): continue; skip what cannot run ({kinds})"
        return Verdict(
            ReplanDecision(action=ReplanAction.CONTINUE, reasoning=text, confidence=1.0), "rule"
        )

    def _record(self, reason: str, verdict: Verdict) -> None:
        d = verdict.decision
        runner = self.runner
        runner.batch.decisions.append(
            {
                "created_at": time.time(),
                "action": d.action.value,
                "source": verdict.source,
                "reasoning": d.reasoning,
                "payload": d.model_dump_json(),
                "prompt_tokens": sum(u.prompt_tokens for u in verdict.usages),
                "completion_tokens": sum(u.completion_tokens for u in verdict.usages),
            }
        )
        self.record_usage(verdict.usages)
        self.hints += d.new_context_hints
        log.info(
            "session=%s decision %s (%s) on %s: %s",
            runner.sid,
            d.action.value,
            verdict.source,
            reason,
            d.reasoning,
        )

    def record_usage(self, usages: list[Usage]) -> None:
        for u in usages:
            self.runner.batch.llm_calls.append(
                {
                    "created_at": time.time(),
                    "role": str(u.role),
                    "model": u.model,
                    "prompt_tokens": u.prompt_tokens,
                    "completion_tokens": u.completion_tokens,
                    "latency_s": u.latency_s,
                }
            )

    # --- executing ------------------------------------------------------------------------
    async def approve(self, event: Event) -> None:
        """A person answered ``planloop approve``: carry out their action on the parked changes."""
        if not self.awaiting:
            log.info("session=%s approval ignored: nothing is waiting for one", self.runner.sid)
            return
        action = ReplanAction(str(event.payload.get("action", "ABORT")).upper())
        text = f"approved by a person: {action.value}" + (
            f" ({event.description})" if event.description else ""
        )
        verdict = Verdict(ReplanDecision(action=action, reasoning=text, confidence=1.0), "human")
        changes, self.awaiting = self.awaiting, []
        await self.runner.store.write(
            self.runner.sid,
            self.runner.epoch,
            [("HSET", self.runner.store.keys.session(self.runner.sid), ["awaiting", ""])],
        )
        self._record("approval", verdict)
        await self._execute(verdict, changes, "approval")

    async def _execute(self, verdict: Verdict, changes: list[Event], reason: str) -> None:
        runner, d = self.runner, verdict.decision
        if verdict.source == "await_human":
            self.awaiting += changes
            await runner.store.write(
                runner.sid,
                runner.epoch,
                [("HSET", runner.store.keys.session(runner.sid), ["awaiting", "approval"])],
            )
            await runner.store.note_progress(runner.sid, "approval_required", reason=d.reasoning)
            return
        await runner.store.note_progress(
            runner.sid,
            "decision",
            action=d.action.value,
            source=verdict.source,
            reasoning=d.reasoning,
        )
        if d.action == ReplanAction.ABORT:
            status = SessionStatus.FAILED if verdict.fail_session else SessionStatus.ABORTED
            runner.outcome = (status, d.reasoning)
            return
        if d.action != ReplanAction.CONTINUE and self.chat is None and not self._fallbacks(changes):
            # Without an LLM only declared fallbacks can be injected; with none to inject,
            # a re-plan (say, one a person approved) can only go on with what is left.
            log.info("session=%s no LLM and no fallback to inject: continuing", runner.sid)
            d = d.model_copy(update={"action": ReplanAction.CONTINUE})
        if d.action == ReplanAction.CONTINUE:
            for event in changes:
                if event.type in FAILURES and event.step_id in runner.steps:
                    await runner.skip_descendants(event.step_id)
            return
        await runner.store.note_progress(
            runner.sid,
            "replan_required",
            reason=reason,
            count=runner.info.replans + 1,
            action=d.action.value,
        )
        try:
            plan = await self._new_plan(verdict, changes)
        except (PlanError, LLMError) as exc:
            log.error("session=%s re-plan failed: %s", runner.sid, exc)
            await runner.count_replan()
            self.pending = [*changes, *self.pending]  # still unresolved: the next trigger decides
            return
        await runner.install_plan(plan, reason=f"{d.action.value}: {d.reasoning}", replan=True)

    def _fallbacks(self, changes: list[Event]) -> list[str]:
        """Failed steps among ``changes`` that declare a fallback sub-graph."""
        steps = self.runner.steps
        return [
            e.step_id
            for e in changes
            if e.type in FAILURES and e.step_id in steps and steps[e.step_id].fallback
        ]

    async def _new_plan(self, verdict: Verdict, changes: list[Event]) -> Plan:
        runner, d = self.runner, verdict.decision
        completed = {i for i, st in runner.states.items() if st.status == StepStatus.COMPLETED}
        failed = [e.step_id for e in changes if e.type in FAILURES and e.step_id in runner.steps]
        if verdict.source == "rule" or self.chat is None:
            plan = runner.plan
            for step_id in failed:
                if runner.steps[step_id].fallback:
                    plan = inject_fallback(plan, step_id)
            validate_plan(plan, runner.ctx.tools, completed=completed)
            return plan
        assert self.chat is not None
        planner = Planner(self.chat, runner.ctx.tools, max_repairs=runner.settings.plan_max_repairs)
        full = d.action == ReplanAction.REPLAN_FULL
        cancel = (
            {i for i in runner.steps if i not in completed}
            if full
            else {*(c for c in d.steps_to_cancel if c in runner.steps), *failed} - completed
        )
        await runner.cancel_steps(sorted(cancel))
        await runner.load_outputs(sorted(completed))
        situation = self.situation(f"{d.action.value}: {d.reasoning}")
        if full:
            new_plan, usages = await asyncio.to_thread(
                planner.replan_full,
                situation,
                runner.plan,
                completed,
                failed_fingerprints=self.failed_fingerprints,
            )
            self.record_usage(usages)
            merged = replace_remaining(runner.plan, completed, new_plan)
            new_ids = frozenset(s.id for s in new_plan.steps) - completed
        else:
            subgraph, usages = await asyncio.to_thread(
                planner.replan_remaining,
                situation,
                runner.plan,
                completed,
                failed_fingerprints=self.failed_fingerprints,
                cancel=cancel,
            )
            self.record_usage(usages)
            merged = merge_remaining(runner.plan, completed, cancel, subgraph.steps)
            new_ids = frozenset(s.id for s in subgraph.steps)
        self.subgraphs.append(
            (Plan(steps=[s for s in merged.steps if s.id in new_ids]).fingerprint(), new_ids)
        )
        return merged

    # --- the situation report -------------------------------------------------------------
    def situation(self, trigger: str) -> Situation:
        runner = self.runner
        steps = tuple(
            StepView(
                id=s.id,
                tool=s.tool,
                title=s.title,
                status=runner.states[s.id].status.value,
                attempts=runner.states[s.id].attempt,
                error=runner.states[s.id].error,
                output=runner.outputs.get(s.id),
                dependencies=tuple(s.dependencies),
            )
            for s in runner.plan.steps
        )
        events = tuple(
            EventView(e.type.value, e.severity.value, e.step_id, e.description) for e in self.recent
        )
        return Situation(
            goal=runner.plan.goal or runner.info.goal,
            constraints=tuple([*runner.plan.constraints, *self.constraints]),
            steps=steps,
            events=events,
            replans_used=runner.info.replans,
            max_replans=self.max_replans,
            trigger=trigger,
            down_tools=tuple(sorted(runner.down_tools)),
            hints=tuple(self.hints),
            sensitive=frozenset(self._sensitive()),
            preview_above_bytes=runner.settings.inline_value_max_bytes,
        )

    def _sensitive(self) -> set[str]:
        # the catalogue's too: this supervisor may not have imported every tool's module
        sensitive = self.runner.ctx.dispatcher.sensitive
        return set(sensitive.of_tools(step.tool for step in self.runner.plan.steps))

    def state(self) -> dict[str, Any]:
        """What must survive a supervisor crash (stored in the session hash)."""
        return {
            "pending": [e.model_dump(mode="json") for e in self.pending],
            "awaiting": [e.model_dump(mode="json") for e in self.awaiting],
            "constraints": self.constraints,
            "hints": self.hints,
            "failed_fingerprints": sorted(self.failed_fingerprints),
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.pending = [Event.model_validate(e) for e in data.get("pending", [])]
        self.awaiting = [Event.model_validate(e) for e in data.get("awaiting", [])]
        self.constraints = list(data.get("constraints", []))
        self.hints = list(data.get("hints", []))
        self.failed_fingerprints = set(data.get("failed_fingerprints", []))
