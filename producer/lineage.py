"""Forking a session from a plan version, and continuing one its deadline or a budget ended.

``fork`` starts a new session (a new id) from plan version N of another, or from an edited
plan: the steps the new plan keeps as they ran (planner/carry_over.py) start completed,
with the parent's outputs, and never run again; the new session names its parent and
version. ``continue_session`` resumes the same session (a new epoch, taken by the next
supervisor like any expired lease): completed steps stay completed, what failed or was
cancelled runs again, and a write whose compensation ran is redone, as a new effect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis

from planloop.config.settings import Settings
from planloop.core.errors import (
    ContinueRefusedError,
    PlanVersionNotFoundError,
    SessionNotFoundError,
)
from planloop.core.hot_state import HotState
from planloop.core.models import SessionOptions, SessionRecord, SessionStatus, StepState
from planloop.core.models import StepStatus as S
from planloop.core.tools import ToolRegistry
from planloop.planner import input_check
from planloop.planner.carry_over import carry_over
from planloop.planner.plan import Plan
from planloop.planner.validation import validate_plan
from planloop.producer.steering import SessionSteering

if TYPE_CHECKING:
    from planloop.core.record import SqlRecord

# What ended a session that `continue` may resume: its deadline, or a spent budget (re-plan,
# token or cost; core/llm_budget.py and supervisor/session/replan_budget.py word them so).
CONTINUABLE = {
    SessionStatus.FAILED: ("session deadline of", "budget spent"),
    SessionStatus.ABORTED: ("budget spent",),
}
RUN_AGAIN = (S.FAILED, S.INTERRUPTED, S.CANCELLED, S.RUNNING, S.READY)
CLEARED_ON_CONTINUE = ("finished_at", "error", "report", "awaiting", "cancel")


def continue_refusal(info: SessionRecord, leased: bool) -> str | None:
    """Why ``info`` cannot be continued (``leased``: a supervisor holds it), or None."""
    if leased or not info.status.ended:
        return "it is still running (continue resumes a session that ended)"
    markers = CONTINUABLE.get(info.status)
    if markers is None:
        return "only a session that ended failed or aborted can be continued"
    if not any(m in info.error for m in markers):
        return (
            "it did not end by its deadline or a budget (its end was: "
            f"{info.error or 'no reason recorded'}); fork it instead"
        )
    return None


def compensated_steps(info: SessionRecord) -> set[str]:
    """The steps whose compensation ran to completion when the session ended."""
    done = (info.report or {}).get("compensations") or []
    return {c["step"] for c in done if isinstance(c, dict) and c.get("status") == "completed"}


def reset_states(states: Mapping[str, StepState], compensated: set[str]) -> dict[str, StepState]:
    """The steps a continue runs again (id -> their new pending state): every one that did
    not complete (and was not skipped by a decision), and every completed write whose
    compensation undid it. Attempt numbers go on from where they were."""
    again = {
        step_id: st
        for step_id, st in states.items()
        if st.status in RUN_AGAIN or (st.status == S.COMPLETED and step_id in compensated)
    }
    return {i: StepState(status=S.PENDING, attempt=st.attempt) for i, st in again.items()}


class SessionLineage(SessionSteering):
    """The lineage part of :class:`planloop.producer.client.Producer`: fork and continue
    (it brings the hot state, the tool catalogue and the SQL record)."""

    settings: Settings
    state: HotState
    tools: ToolRegistry

    @property
    def record(self) -> SqlRecord:
        raise NotImplementedError  # the Producer's, opened on first use

    def fork(
        self,
        sid: str,
        *,
        version: int | None = None,
        plan: Plan | None = None,
        options: SessionOptions | None = None,
        actor: str = "",
    ) -> str:
        """Start a new session from plan version ``version`` of ``sid`` (default: its
        latest), or from ``plan`` (an edited plan, checked like a submitted one); returns
        the new session's id. ``options`` default to the parent's.

        Raises:
            SessionNotFoundError: no session ``sid``.
            PlanVersionNotFoundError: ``sid`` has no plan version ``version``.
            PlanError: the edited plan cannot run or breaks an input limit.
        """
        parent = self.state.session(sid)
        latest = parent.plan_version
        chosen = latest if version is None else version
        if not 1 <= chosen <= latest:
            raise PlanVersionNotFoundError(sid, chosen, latest)
        latest_json = self._plan_text(sid, latest)
        new_plan = (
            plan if plan is not None else Plan.model_validate_json(self._plan_text(sid, chosen))
        )
        plan_json = input_check.stored_plan(new_plan, self.limits)
        validate_plan(new_plan, self.tools)
        chosen_options = options or parent.options
        input_check.check_options(chosen_options, self.limits)
        # The latest version holds every completed step as it ran (a re-plan freezes them).
        parent_plan = Plan.model_validate_json(latest_json)
        states = self.state.steps(sid, parent_plan.by_id)
        carried = carry_over(parent_plan, states, new_plan, parent_sid=sid)
        from planloop.producer.client import new_session_id

        child = new_session_id()
        self.state.create_session(
            child,
            plan_json=plan_json,
            goal=new_plan.goal,
            options=chosen_options,
            checked=True,  # input_check.stored_plan validated this very text
            steps=carried,
            fields={
                "forked_from": sid,
                "forked_version": str(chosen),
                "forked_by": actor,
                "carried": json.dumps({i: st.to_fields() for i, st in carried.items()}),
            },
        )
        return child

    def continue_session(
        self,
        sid: str,
        *,
        max_replans: int | None = None,
        deadline_s: float | None = None,
        max_tokens: int | None = None,
        actor: str = "",
    ) -> SessionRecord:
        """Resume ``sid``, which ended failed or aborted by its deadline or a budget: the
        same session, taken at a new epoch by the next supervisor. ``max_replans`` and
        ``max_tokens`` are what it may spend from now on (added to what it spent);
        ``deadline_s`` counts from now (default: its own deadline, again from now).
        Returns the session as it was before.

        Raises:
            SessionNotFoundError: no session ``sid``.
            ContinueRefusedError: it is running, or ended otherwise (its reason named).
        """
        info = self.state.session(sid)
        keys, r = self.state.keys, self.state.r
        refusal = continue_refusal(info, bool(r.exists(keys.lease(sid))))
        if refusal is not None:
            raise ContinueRefusedError(sid, info.status.value, refusal)
        plan = Plan.model_validate_json(self._plan_text(sid, info.plan_version))
        reset = reset_states(self.state.steps(sid, plan.by_id), compensated_steps(info))
        options = _more_budget(info, max_replans, deadline_s, max_tokens)
        input_check.check_options(options, self.limits)
        redone = dict(info.redone)
        for step_id in compensated_steps(info) & reset.keys():
            redone[step_id] = redone.get(step_id, 0) + 1  # a new effect: a new key
        carried = {i: f for i, f in info.carried.items() if i not in reset}
        # The record first: the next owner's claim is refused while SQL says it ended.
        if not self.record.reopen(sid, [info.status.value]):
            raise ContinueRefusedError(sid, info.status.value, "the SQL record has no such end")
        fields: dict[str, Any] = {
            "status": SessionStatus.PENDING.value,
            "started_at": repr(time.time()),  # the deadline counts from now
            "options": options.model_dump_json(exclude_defaults=True),
            "continued": info.continued + 1,
            "continued_by": actor,
            "redone": json.dumps(redone),
            "carried": json.dumps(carried),
        }
        self._reopen_hot(sid, info.status, fields, reset)
        return info

    def _reopen_hot(
        self,
        sid: str,
        status: SessionStatus,
        fields: dict[str, Any],
        reset: Mapping[str, StepState],
    ) -> None:
        """The session hash and step hashes as the continue leaves them, in one transaction
        that fails if the session changed since it was read."""
        keys, r = self.state.keys, self.state.r
        with r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(keys.session(sid))  # type: ignore[no-untyped-call]
                if pipe.hget(keys.session(sid), "status") != status.value:
                    raise ContinueRefusedError(sid, status.value, "it changed meanwhile")
                pipe.multi()
                pipe.hdel(keys.session(sid), *CLEARED_ON_CONTINUE)
                pipe.hset(keys.session(sid), mapping=fields)  # type: ignore[arg-type]
                for step_id, st in reset.items():
                    pipe.delete(keys.step(sid, step_id))
                    pipe.hset(keys.step(sid, step_id), mapping=st.to_fields())  # type: ignore[arg-type]
                pipe.sadd(keys.active, sid)
                pipe.xadd(keys.inbox, {"sid": sid})
                pipe.execute()
            except redis.WatchError:
                raise ContinueRefusedError(sid, status.value, "it changed meanwhile") from None

    def children(self, sid: str) -> list[tuple[str, int]]:
        """The sessions forked from ``sid`` (id, plan version), from the SQL record."""
        return self.record.forks_of(sid)

    def _plan_text(self, sid: str, version: int) -> str:
        text = self.state.plan_json(sid, version)
        if text is None:  # expired from Redis: the record keeps every version
            rows = {row.version: row.plan for row in self.record.plan_versions(sid)}
            text = rows.get(version)
        if text is None:
            raise SessionNotFoundError(sid)
        return text


def _more_budget(
    info: SessionRecord,
    max_replans: int | None,
    deadline_s: float | None,
    max_tokens: int | None,
) -> SessionOptions:
    """The session's options with what a continue adds: re-plans and tokens on top of what
    it spent, a deadline from now."""
    update: dict[str, Any] = {}
    if max_replans is not None:
        update["max_replans"] = info.replans + max_replans
    if max_tokens is not None:
        spent = sum(sum(tokens) for tokens in info.llm_usage.values())
        update["max_tokens"] = spent + max_tokens
    if deadline_s is not None:
        update["deadline_s"] = deadline_s
    return SessionOptions.model_validate({**info.options.model_dump(), **update})
