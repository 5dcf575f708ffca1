"""Changing what a session runs: skip a branch, cancel steps, install a new plan version, and
carry out a deliberation's verdict through that one freeze / prune / inject path."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from planloop.core.errors import LLMError, PlanError
from planloop.core.metrics import REPLANS
from planloop.core.models import Event, EventType, SessionStatus, Severity, StepState, StepStatus
from planloop.planner.dag import descendants
from planloop.planner.decision import ReplanAction
from planloop.planner.merge import inject_fallback
from planloop.planner.plan import Plan
from planloop.planner.validation import validate_plan
from planloop.supervisor.session.deadline import DEADLINE_NEAR
from planloop.supervisor.session.decision_log import record_decision, record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.limits import past_limits
from planloop.supervisor.session.nothing_added import (
    DROPPED_NOTE,
    NOTHING_ADDED,
    dropped_steps,
    nothing_added_verdict,
    unreplaced_critical,
)
from planloop.supervisor.session.policy import FAILURES
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.state import has_ended
from planloop.supervisor.session.verdict import Decision

log = logging.getLogger(__name__)

Revoke = Callable[[Iterable[str]], None]  # revoke queued task ids (the dispatcher's)
CommitDecisions = Callable[[], Awaitable[None]]  # write the decisions recorded so far to SQL


async def _kept_for_the_checkpoint() -> None:
    """No commit of its own: the decisions go with the session's next checkpoint."""


def fallback_plan(io: SessionIO, failed: list[str]) -> Plan:
    """The plan with the declared fallback of each of ``failed`` injected, validated."""
    state = io.state
    plan = state.plan
    injected: dict[str, list[str]] = {}
    for step_id in failed:
        if state.steps[step_id].fallback:
            injected[step_id] = [f.id for f in state.steps[step_id].fallback]
            plan = inject_fallback(plan, step_id)
    validate_plan(plan, io.tools, completed=state.completed())
    state.fallbacks.update(injected)  # the ending says whose fallback took over
    return plan


class PlanChanges:
    """The freeze / prune / inject path every decision goes through."""

    def __init__(
        self,
        io: SessionIO,
        revoke: Revoke,
        commit_decisions: CommitDecisions = _kept_for_the_checkpoint,
    ) -> None:
        self.io = io
        self.state = io.state
        self.store = io.store
        self.revoke = revoke
        self.commit_decisions = commit_decisions

    async def skip_descendants(self, step_id: str) -> None:
        state, sid = self.state, self.io.sid
        skipped = [
            d for d in sorted(descendants(state.plan, step_id)) if not has_ended(state.states[d])
        ]
        for d in skipped:
            state.states[d].status = StepStatus.SKIPPED
            state.states[d].note = f"dependency {step_id!r} did not complete"
            state.dirty.add(d)
        ops = [
            self.store.step_write(sid, d, status="skipped", note=state.states[d].note)
            for d in skipped
        ]
        await self.store.write(sid, self.io.epoch, ops)
        if skipped:
            await self.io.append_event(
                Event(
                    type=EventType.DEPENDENCY_BROKEN,
                    severity=Severity.INFO,
                    step_id=step_id,
                    description=f"{step_id} did not complete; skipped {', '.join(skipped)}",
                    payload={"skipped": skipped},
                ),
            )

    async def retry_step(self, step_id: str, note: str) -> None:
        """Make a step that failed for good ready again, and the dependents skipped because of
        it pending: they run when it completes (the next attempt is its last)."""
        state, sid = self.state, self.io.sid
        st = state.states[step_id]
        st.status, st.note, st.not_before = StepStatus.READY, note, 0.0
        revived = [
            d
            for d in sorted(descendants(state.plan, step_id))
            if state.states[d].status == StepStatus.SKIPPED
            and state.states[d].note.startswith("dependency ")
        ]
        for d in revived:
            state.states[d].status, state.states[d].note = StepStatus.PENDING, ""
        state.dirty.update([step_id, *revived])
        state.candidates.add(step_id)
        ops = [self.store.step_write(sid, step_id, status="ready", note=note, not_before=0.0)]
        ops += [self.store.step_write(sid, d, status="pending", note="") for d in revived]
        await self.store.write(sid, self.io.epoch, ops)

    async def cancel_steps(
        self, step_ids: list[str], reason: str = "cancelled by a re-plan"
    ) -> None:
        """Cancel steps that have not ended: revoke and fence running attempts."""
        states, sid = self.state.states, self.io.sid
        running = [i for i in step_ids if states[i].status == StepStatus.RUNNING]
        self.revoke(states[i].task_id for i in running)
        for step_id in running:
            await self.io.end_attempt(
                step_id,
                states[step_id].attempt,
                status=StepStatus.CANCELLED,
                error_kind="cancelled",
                description=reason,
            )
        ops = []
        for step_id in step_ids:
            st = states[step_id]
            if step_id in running or not has_ended(st):
                st.status, st.note = StepStatus.CANCELLED, reason
                ops.append(self.store.step_write(sid, step_id, status=st.status, note=reason))
                self.state.dirty.add(step_id)
        await self.store.write(sid, self.io.epoch, ops)

    async def count_replan(self) -> None:
        state = self.state
        state.info = state.info.model_copy(update={"replans": state.info.replans + 1})
        await self.io.write_session("replans", state.info.replans)
        state.batch.session["replans"] = state.info.replans
        REPLANS.inc()

    async def install_plan(self, plan: Plan, *, reason: str, replan: bool) -> None:
        """Store ``plan`` as the next version and run it from here on.

        Steps of the old version that the new one drops are cancelled; new steps start
        pending; a re-used id keeps counting attempts so task ids stay unique.
        """
        state, sid = self.state, self.io.sid
        version = state.info.plan_version + 1
        keys, raw = self.store.keys, plan.model_dump_json()
        ops: list[tuple[str, str, list[Any]]] = [("SET", keys.plan(sid, version), [raw, "NX"])]
        kept = {s.id for s in plan.steps}
        for step_id in [i for i in state.steps if i not in kept]:
            if not has_ended(state.states[step_id]):
                ops.append(
                    self.store.step_write(
                        sid, step_id, status="cancelled", note="dropped by re-plan"
                    )
                )
            state.states.pop(step_id, None)
        for step in plan.steps:
            old = state.states.get(step.id)
            # New ids start fresh, and so do dropped steps a re-plan brings back; a step
            # that failed for good and stays (a fallback took its place) keeps its state.
            if old is None or old.status in (StepStatus.CANCELLED, StepStatus.SKIPPED):
                fresh = StepState(attempt=old.attempt if old else 0)
                state.states[step.id] = fresh
                ops.append(self.store.step_write(sid, step.id, **fresh.to_fields()))
                state.dirty.add(step.id)
        replans = state.info.replans + (1 if replan else 0)
        ops.append(("HSET", keys.session(sid), ["plan_version", version, "replans", replans]))
        await self.store.write(sid, self.io.epoch, ops)
        if replan:
            REPLANS.inc()
        state.use_plan(plan)
        state.reindex()
        state.info = state.info.model_copy(update={"plan_version": version, "replans": replans})
        state.batch.plan_versions.append(
            {"version": version, "plan": raw, "reason": reason, "created_at": time.time()}
        )
        state.batch.session.update({"plan_version": version, "replans": replans})
        log.info(
            "session=%s plan version %d installed (%d steps): %s",
            sid,
            version,
            len(plan.steps),
            reason,
        )

    async def notice_deadline(self, note: str) -> None:
        """Say on the stream and the progress stream that the rules decided for lack of time."""
        await self.io.append_event(
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                severity=Severity.INFO,
                description=note,
                payload={"notice": DEADLINE_NEAR},
            )
        )
        await self.store.note_progress(self.io.sid, DEADLINE_NEAR, reason=note)

    # --- carrying out a verdict -----------------------------------------------------------
    async def execute(self, decision: Decision, deliberation: Deliberation) -> None:
        """Carry out ``decision``: park it for a person, end the session, skip what cannot
        run, or install the next plan version (a declared fallback, or the LLM's).

        A decision whose re-plan can no longer start (too little time left, or the LLM budget
        spent by the decision's own call) is followed by the rules' or the budget's verdict,
        recorded and carried out in its place.
        """
        followed: Decision | None = decision
        while followed is not None:
            followed = await self._carry_out(followed, deliberation)

    async def _carry_out(self, decision: Decision, deliberation: Deliberation) -> Decision | None:
        """Carry out one decision; the one to carry out instead, when its re-plan cannot run."""
        state, sid = self.state, self.io.sid
        verdict, changes, d = decision.verdict, decision.changes, decision.verdict.choice
        if verdict.source == "await_human":
            deliberation.park(changes)
            await self.io.write_session("awaiting", "approval")
            await self.store.note_progress(sid, "approval_required", reason=d.reasoning)
            return None
        if verdict.deadline_note:
            await self.notice_deadline(verdict.deadline_note)
        await self.store.note_progress(
            sid, "decision", action=d.action.value, source=verdict.source, reasoning=d.reasoning
        )
        if d.action == ReplanAction.ABORT:
            status = SessionStatus.FAILED if verdict.fail_session else SessionStatus.ABORTED
            state.outcome = (status, d.reasoning)
            return None
        failed = [e.step_id for e in changes if e.type in FAILURES and e.step_id in state.steps]
        rules = verdict.source == "rule" or deliberation.chat is None
        fallbacks = [i for i in failed if state.steps[i].fallback]
        if d.action != ReplanAction.CONTINUE and deliberation.chat is None and not fallbacks:
            # Without an LLM only declared fallbacks can be injected; with none to inject,
            # a re-plan (say, one a person approved) can only go on with what is left.
            log.info("session=%s no LLM and no fallback to inject: continuing", sid)
            d = d.model_copy(update={"action": ReplanAction.CONTINUE})
        if d.action == ReplanAction.CONTINUE:
            for step_id in failed:
                await self.skip_descendants(step_id)
            return None
        # The decision took the time a re-plan needs (the rules decide instead), or its own
        # call spent the LLM budget: no re-planner call starts.
        limited = None
        if not rules:
            limited = past_limits(
                deliberation, changes, replanning=True, budget=verdict.source != "human"
            )
        if limited is not None:
            reason = decision.reason if limited.deadline_note else "budget"
            instead = Decision(limited, changes, reason)
            record_decision(state.batch, sid, instead)
            await self.commit_decisions()
            return instead
        await self.store.note_progress(
            sid,
            "replan_required",
            reason=decision.reason,
            count=state.info.replans + 1,
            action=d.action.value,
        )
        try:
            if rules:
                plan = fallback_plan(self.io, failed)
            else:
                cancel = deliberation.to_cancel(d, changes)
                await self.cancel_steps(sorted(cancel))
                replanned, usages = await deliberation.replan(d, cancel)
                record_usage(state.batch, usages)
                if replanned is None:
                    await self.count_replan()
                    await self.nothing_added(Decision(verdict, changes, decision.reason), cancel)
                    return None
                plan = replanned
        except (PlanError, LLMError) as exc:
            log.error("session=%s re-plan failed: %s", sid, exc)
            await self.count_replan()
            deliberation.requeue(changes)
            return None
        await self.install_plan(plan, reason=f"{d.action.value}: {d.reasoning}", replan=True)
        return None

    async def nothing_added(self, decision: Decision, removed: set[str]) -> None:
        """The re-plan ``decision`` asked for added nothing (nothing_added.py): drop the
        ``removed`` steps and their orphans, then fail the session if a critical step is
        left failed with nothing in its place; else go on with what is left."""
        state, sid = self.state, self.io.sid
        orphaned = dropped_steps(state.plan, state.states, removed)
        await self.cancel_steps(orphaned, DROPPED_NOTE)
        named = [
            i for i in removed if (st := state.states.get(i)) and st.status == StepStatus.CANCELLED
        ]
        dropped = sorted({*named, *orphaned})
        log.info("session=%s %s; dropped: %s", sid, NOTHING_ADDED, ", ".join(dropped) or "nothing")
        await self.store.note_progress(sid, "nothing_added", dropped=",".join(dropped))
        critical = unreplaced_critical(state.plan, state.states, state.fallbacks)
        verdict = nothing_added_verdict(decision.verdict.choice, critical)
        if verdict is not None:
            escalated = Decision(verdict, decision.changes, NOTHING_ADDED)
            record_decision(state.batch, sid, escalated)
            await self.commit_decisions()
            await self.store.note_progress(
                sid,
                "decision",
                action=verdict.choice.action.value,
                source=verdict.source,
                reasoning=verdict.choice.reasoning,
            )
            state.outcome = (SessionStatus.FAILED, verdict.choice.reasoning)
