"""A worker's outcome of a step applied: completed (its dependents become candidates, a
finished phase is a milestone), or failed (retried within its budget, past it a change the
deliberation sees)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from planloop.core.models import ErrorKind, Event, EventType, Severity, StepStatus
from planloop.planner.plan import Step
from planloop.planner.react import usages_of
from planloop.supervisor.session.broken import dependency_broken
from planloop.supervisor.session.decision_log import record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.failures import settle_failure
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.state import attempt_row
from planloop.supervisor.session.usage_ledger import count_reported

log = logging.getLogger(__name__)

OUTCOME_STATUS = {
    EventType.TASK_COMPLETED: StepStatus.COMPLETED,
    EventType.TASK_UNEXPECTED_RESULT: StepStatus.COMPLETED,
    EventType.TASK_FAILED: StepStatus.FAILED,
    EventType.TASK_INTERRUPTED: StepStatus.INTERRUPTED,
}


class Outcomes:
    """Applies steps' outcomes to one session's state and decides on their failures."""

    def __init__(
        self, io: SessionIO, deliberation: Deliberation, unresolved: Callable[[str], bool]
    ) -> None:
        self.io = io
        self.state = io.state
        self.deliberation = deliberation
        self.unresolved = unresolved  # whether a step's reference could not be resolved

    async def on_outcome(self, event: Event) -> None:
        state = self.state
        st = state.states.get(event.step_id)
        if st is None or st.attempt != event.attempt or st.status != StepStatus.RUNNING:
            return  # an old attempt's outcome, or one already applied
        payload = event.payload
        reported = usages_of(payload.get("llm_usage"))  # an agent step's calls
        count_reported(state, reported)  # charged by its worker as they arrived
        record_usage(state.batch, reported)  # a worker without a ledger: recorded here
        st.status = OUTCOME_STATUS[event.type]
        st.worker = str(payload.get("worker", st.worker))
        st.started_at = float(payload.get("started_at") or st.started_at)
        st.finished_at = float(payload.get("finished_at") or event.occurred_at)
        st.output_ref = str(payload.get("output_ref", ""))
        st.error_kind = str(payload.get("error_kind", ""))
        st.error = "" if st.status == StepStatus.COMPLETED else event.description
        state.dirty.add(event.step_id)
        if st.status != StepStatus.COMPLETED:
            state.batch.attempts.append(attempt_row(event.step_id, st))
        if st.error_kind == ErrorKind.UNAVAILABLE:
            state.down_tools.add(state.steps[event.step_id].tool)
        if st.status != StepStatus.COMPLETED:
            await self.decide_failure(event.step_id)
            return
        state.down_tools.discard(state.steps[event.step_id].tool)
        state.candidates.update(state.dependents.get(event.step_id, ()))
        if event.type == EventType.TASK_UNEXPECTED_RESULT:
            self.deliberation.note(event)
        await self._check_milestone(state.steps[event.step_id])

    async def decide_failure(self, step_id: str) -> None:
        """Retry within the step's budget; past it the failure is a context change."""
        state, settings = self.state, self.io.settings
        settled = settle_failure(
            state,
            step_id,
            max_retries=self.io.max_retries(state.steps[step_id]),
            backoff_base_s=settings.retry_backoff_s,
            backoff_max_s=settings.retry_backoff_max_s,
            now=time.time(),
            store_retry_interval_s=settings.store_retry_interval_s,
            store_retry_limit=settings.store_retry_limit,
        )
        if settled.retry:
            st = state.states[step_id]
            log.info(
                "session=%s step=%s attempt=%d %s: retry",
                state.sid,
                step_id,
                st.attempt,
                st.error_kind,
            )
        await self.io.write_step(step_id, **settled.fields)
        if settled.final is not None:
            self.deliberation.note(settled.final)
            await self._raise_broken(step_id)

    async def _raise_broken(self, step_id: str) -> None:
        """With an LLM, a final failure that breaks critical work (or an unresolvable
        reference) is a CRITICAL DEPENDENCY_BROKEN the decision agent sees before any branch
        is skipped; the rule policy keeps skipping the branch and saying so afterwards."""
        if self.deliberation.chat is None:
            return
        event = dependency_broken(self.state, step_id, unresolved=self.unresolved(step_id))
        if event is None:
            return
        await self.io.append_event(event)
        self.deliberation.note(event)

    async def _check_milestone(self, step: Step) -> None:
        phase, state = step.phase, self.state
        if not phase:
            return
        members = [s.id for s in state.plan.steps if s.phase == phase]
        if all(state.states[m].status == StepStatus.COMPLETED for m in members):
            event = Event(
                type=EventType.MILESTONE_REACHED,
                severity=Severity.INFO,
                description=f"phase {phase!r} finished ({len(members)} steps)",
                payload={"phase": phase, "steps": members},
            )
            await self.io.append_event(event)
            if self.deliberation.reviews_milestones:
                # Noted only for a review: a change nothing will decide about would hold
                # the session open (it ends when nothing is left to decide).
                self.deliberation.note(event)
