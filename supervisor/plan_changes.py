"""Changing what a session runs: skip a branch, cancel steps, install a new plan version."""

from __future__ import annotations

import logging
import time
from typing import Any

from core.models import Event, EventType, Severity, StepState, StepStatus
from planner.dag import descendants
from planner.plan import Plan
from supervisor.session_base import SessionBase, has_ended

log = logging.getLogger(__name__)


class PlanChanges(SessionBase):
    """The freeze / prune / inject path every decision goes through."""

    async def skip_descendants(self, step_id: str) -> None:
        skipped = [
            d for d in sorted(descendants(self.plan, step_id)) if not has_ended(self.states[d])
        ]
        for d in skipped:
            self.states[d].status = StepStatus.SKIPPED
            self.states[d].note = f"dependency {step_id!r} did not complete"
            self.dirty.add(d)
        ops = [
            self.store.step_write(self.sid, d, status="skipped", note=self.states[d].note)
            for d in skipped
        ]
        await self.store.write(self.sid, self.epoch, ops)
        if skipped:
            await self.append_event(
                Event(
                    type=EventType.DEPENDENCY_BROKEN,
                    severity=Severity.INFO,
                    step_id=step_id,
                    description=f"{step_id} did not complete; skipped {', '.join(skipped)}",
                    payload={"skipped": skipped},
                ),
            )

    async def cancel_steps(
        self, step_ids: list[str], reason: str = "cancelled by a re-plan"
    ) -> None:
        """Cancel steps that have not ended: revoke and fence running attempts."""
        running = [i for i in step_ids if self.states[i].status == StepStatus.RUNNING]
        self.ctx.dispatcher.revoke(self.states[i].task_id for i in running)
        for step_id in running:
            st = self.states[step_id]
            await self.end_attempt(
                step_id,
                st.attempt,
                status=StepStatus.CANCELLED,
                error_kind="cancelled",
                description=reason,
            )
        ops = []
        for step_id in step_ids:
            st = self.states[step_id]
            if step_id in running or not has_ended(st):
                st.status, st.note = StepStatus.CANCELLED, reason
                ops.append(self.store.step_write(self.sid, step_id, status=st.status, note=reason))
                self.dirty.add(step_id)
        await self.store.write(self.sid, self.epoch, ops)

    async def count_replan(self) -> None:
        self.info = self.info.model_copy(update={"replans": self.info.replans + 1})
        await self.store.write(
            self.sid,
            self.epoch,
            [("HSET", self.store.keys.session(self.sid), ["replans", self.info.replans])],
        )
        self.batch.session["replans"] = self.info.replans

    async def install_plan(self, plan: Plan, *, reason: str, replan: bool) -> None:
        """Store ``plan`` as the next version and run it from here on.

        Steps of the old version that the new one drops are cancelled; new steps start
        pending; a re-used id keeps counting attempts so task ids stay unique.
        """
        version = self.info.plan_version + 1
        keys, raw = self.store.keys, plan.model_dump_json()
        ops: list[tuple[str, str, list[Any]]] = [("SET", keys.plan(self.sid, version), [raw, "NX"])]
        for step_id in [i for i in self.steps if i not in {s.id for s in plan.steps}]:
            if not has_ended(self.states[step_id]):
                ops.append(
                    self.store.step_write(
                        self.sid, step_id, status="cancelled", note="dropped by re-plan"
                    )
                )
            self.states.pop(step_id, None)
        for step in plan.steps:
            old = self.states.get(step.id)
            # New ids start fresh, and so do dropped steps a re-plan brings back; a step
            # that failed for good and stays (a fallback took its place) keeps its state.
            if old is None or old.status in (StepStatus.CANCELLED, StepStatus.SKIPPED):
                fresh = StepState(attempt=old.attempt if old else 0)
                self.states[step.id] = fresh
                ops.append(self.store.step_write(self.sid, step.id, **fresh.to_fields()))
                self.dirty.add(step.id)
        replans = self.info.replans + (1 if replan else 0)
        ops.append(("HSET", keys.session(self.sid), ["plan_version", version, "replans", replans]))
        await self.store.write(self.sid, self.epoch, ops)
        self._use_plan(plan)
        self._reindex()
        self.info = self.info.model_copy(update={"plan_version": version, "replans": replans})
        self.batch.plan_versions.append(
            {"version": version, "plan": raw, "reason": reason, "created_at": time.time()}
        )
        self.batch.session.update({"plan_version": version, "replans": replans})
        log.info(
            "session=%s plan version %d installed (%d steps): %s",
            self.sid,
            version,
            len(plan.steps),
            reason,
        )
