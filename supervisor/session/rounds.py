"""Rounds with critique, and the final answer of a session with an LLM.

When every step of a round has ended and the session would end completed, the critic judges
the results against the goal. Not passed with rounds left: the next round is planned from the
feedback through the re-plan merge path (completed steps frozen, a new plan version), counted
apart from the re-plan budget. Otherwise the session ends, and the summarizer writes its
answer from the goal, the results and the critic's last verdict.

Every session with an LLM ends with an answer, whatever its status: a completed plan whose
answer step stated one (fitting the ``answer_schema``) needs no summarizer; a failed or
aborted session gets a partial answer (what was achieved, what failed); when no model call
may or can be made (a cancel, a spent budget, a failing endpoint) Planloop writes its own
account of the steps instead, marked ``source: planloop``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from planloop.core.errors import LLMError, PlanError
from planloop.core.masking import mask, mask_text
from planloop.core.metrics import ROUNDS
from planloop.core.models import SessionStatus
from planloop.planner.context import fit_results
from planloop.planner.critic import Critic, Critique
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.summarizer import SessionAnswer, Summarizer, schema_problem
from planloop.supervisor.session.answer_text import (
    DEAD,
    account_text,
    compensations_text,
    ended_text,
    looks_complete,
    stated_answer,
    step_results,
)
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.deadline import short_of_time
from planloop.supervisor.session.decision_log import record_usage
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.nothing_added import NOTHING_ADDED
from planloop.supervisor.session.ports import SessionIO
from planloop.supervisor.session.state import SessionState

log = logging.getLogger(__name__)

JUDGEMENT_FIELD = "judgement"  # the critic's last verdict with its plan version and answer


def next_round(critique: Critique | None, rounds_done: int, max_rounds: int) -> bool:
    """Whether the critic's verdict starts another round: not passed, and the session has
    run fewer than ``max_rounds`` rounds (the first plan is round 1)."""
    return critique is not None and not critique.passed and rounds_done + 1 < max_rounds


def critique_text(critique: Critique | None) -> str:
    if critique is None:
        return ""
    verdict = "passed" if critique.passed else "NOT passed"
    missing = f"; missing: {', '.join(critique.missing)}" if critique.missing else ""
    return f"{verdict} (confidence {critique.confidence:g}): {critique.feedback}{missing}"


class Judgement(BaseModel):
    """The critic's verdict on one plan version, and the answer it wrote when it passed."""

    plan_version: int
    critique: Critique
    answer: SessionAnswer | None = None


class Rounds:
    """The critic between rounds and the summarizer at the end, for one session."""

    def __init__(self, io: SessionIO, changes: PlanChanges, deliberation: Deliberation) -> None:
        self.io = io
        self.changes = changes
        self.deliberation = deliberation
        self.critique: Critique | None = None
        self._judged_version = -1  # the plan version the critic last judged
        self.critic_failed = False  # a round was not passed (a reason to reflect)
        self.direct = ""  # why the goal was answered with no plan (none: it was planned)
        self.ready: SessionAnswer | None = None  # the answer a passing critic wrote
        self._fitted: dict[str, str] = {}  # the newest results (as JSON) -> their text

    @property
    def state(self) -> SessionState:
        return self.io.state

    @property
    def max_rounds(self) -> int:
        chosen = self.state.info.options.max_rounds
        return self.io.settings.max_rounds if chosen is None else chosen

    def _sensitive(self) -> set[str]:
        return set(self.deliberation.sensitive.of_tools(s.tool for s in self.state.plan.steps))

    def _blocked(self) -> str:
        """Why no LLM call may start now ("" when one may)."""
        spent = self.deliberation.llm_budget_spent()
        if spent is not None:
            return spent
        return short_of_time(self.state, self.io.settings, time.time())

    async def _results(self) -> str:
        """The results text of the critic's and the summarizer's prompts, within the
        ``context_max_chars`` budget: past it, compressed by the compressor role (when a
        model call may start) or by the rule-based ladder. Both prompts of one plan
        version's results share one compression."""
        state = self.state
        results = step_results(state)
        key = hashlib.sha256(
            json.dumps([(r.id, r.status, r.error, r.output) for r in results], default=str).encode()
        ).hexdigest()
        if key in self._fitted:
            return self._fitted[key]
        chat = None if self._blocked() else self.deliberation.chat
        fitted, usages = await asyncio.to_thread(
            fit_results,
            results,
            goal=state.plan.goal or state.info.goal,
            critique=critique_text(self.critique),
            sensitive=self._sensitive(),
            budget_chars=self.io.settings.context_max_chars,
            chat=chat,
        )
        record_usage(state.batch, usages)
        if fitted.compressed:
            log.info("session=%s results compressed: %s", self.io.sid, fitted.compressed)
        self._fitted = {key: fitted.text}  # only the newest results are asked for again
        return fitted.text

    async def review(self) -> None:
        """Judge a round that just ended completed; start the next round when it failed."""
        state = self.state
        if self.deliberation.chat is None or state.outcome is None:
            return
        if state.outcome[0] != SessionStatus.COMPLETED:
            return
        version = state.info.plan_version
        if self._judged_version == version or self._blocked():
            return
        self._judged_version = version
        rounds_done = state.info.rounds
        judgement = await self._stored_judgement(version) or await self._judge(rounds_done)
        if judgement is None:
            return
        critique = judgement.critique
        self.critique, self.ready = critique, judgement.answer
        self.critic_failed = self.critic_failed or not critique.passed
        if not next_round(critique, rounds_done, self.max_rounds):
            if not critique.passed:
                self._not_passed(rounds_done + 1, "")
            return
        unplanned = await self._plan_round(critique, rounds_done + 1)
        if unplanned is None:
            state.outcome = None  # the next round runs
        else:  # the round ends: the critic's verdict and the summarizer's answer stand
            self._not_passed(rounds_done + 1, unplanned)

    def _not_passed(self, rounds: int, why: str) -> None:
        """End completed, saying the critic did not pass the results (and ``why`` no
        further round runs, when rounds were left)."""
        state = self.state
        assert state.outcome is not None
        note = f"the critic did not pass the results after {rounds} round(s)"
        state.outcome = (
            SessionStatus.COMPLETED,
            "; ".join(filter(None, [state.outcome[1], note, why])),
        )

    async def _judge(self, rounds_done: int) -> Judgement | None:
        """Ask the critic about this plan version's results and keep its verdict (and the
        answer it wrote) in the session hash; None when the critic failed."""
        state, chat = self.state, self.deliberation.chat
        assert chat is not None
        await self.io.load_outputs(sorted(state.completed()))
        schema = state.info.options.answer_schema
        with_answer = looks_complete(state) and stated_answer(state) is None
        try:
            reply, usage = await asyncio.to_thread(
                Critic(chat).judge,
                state.plan.goal or state.info.goal,
                [*state.plan.constraints, *self.deliberation.constraints],
                await self._results(),
                round_number=rounds_done + 1,
                max_rounds=self.max_rounds,
                with_answer=with_answer,
                answer_schema=schema,
            )
        except LLMError as exc:
            log.warning("session=%s critic failed, the round stands: %s", self.io.sid, exc)
            return None
        record_usage(state.batch, [usage])
        critique = reply.verdict()
        ready = None
        written = reply.stated_answer()
        if reply.passed and written is not None and with_answer:
            fits = schema is None or schema_problem(written.data, schema) is None
            if fits:  # else the summarizer writes it, with the schema's repairs
                data = written.data if schema else None
                ready = SessionAnswer(text=written.text, data=data, source="critic")
        judgement = Judgement(plan_version=state.info.plan_version, critique=critique, answer=ready)
        await self.io.write_session(
            "critique", critique.model_dump_json(), JUDGEMENT_FIELD, judgement.model_dump_json()
        )
        await self.io.store.note_progress(
            self.io.sid,
            "critique",
            round=rounds_done + 1,
            passed=critique.passed,
            feedback=mask_text(critique.feedback),
        )
        return judgement

    async def _stored_judgement(self, version: int) -> Judgement | None:
        """The verdict a former owner got for plan ``version`` (a takeover between the
        critic's reply and the session's end asks neither the critic nor the summarizer
        again), or None."""
        stored = await self.io.store.session_field(self.io.sid, JUDGEMENT_FIELD)
        if not stored:
            return None
        try:
            judgement = Judgement.model_validate_json(stored)
        except ValueError:
            log.warning("session=%s stored critic verdict unreadable, judging again", self.io.sid)
            return None
        if judgement.plan_version != version:
            return None
        log.info("session=%s critic verdict for plan v%d kept from before", self.io.sid, version)
        return judgement

    async def _plan_round(self, critique: Critique, number: int) -> str | None:
        """Install the next round's plan version: None when it is installed, else why the
        round could not be planned (no call may start, the re-planner failed, or it added
        nothing: an empty sub-graph, or one that only repeats completed steps)."""
        state, deliberation = self.state, self.deliberation
        blocked = self._blocked()
        if blocked:
            return f"no next round: {blocked}"
        feedback = f"critic, round {number}: {critique.feedback}"
        deliberation.hints.extend([feedback, *(f"missing: {m}" for m in critique.missing)])
        dead = {i for i, st in state.states.items() if st.status in DEAD and i in state.steps}
        decision = ReplanDecision(
            action=ReplanAction.REPLAN_REMAINING,
            reasoning=feedback,
            new_context_hints=list(critique.missing),
        )
        try:
            plan, usages = await deliberation.replan(decision, dead)
        except (PlanError, LLMError) as exc:
            log.error("session=%s round %d could not be planned: %s", self.io.sid, number + 1, exc)
            return f"round {number + 1} could not be planned: {exc}"
        record_usage(state.batch, usages)
        if plan is None:
            log.info("session=%s round %d planned nothing new", self.io.sid, number + 1)
            await self.io.store.note_progress(self.io.sid, "nothing_added", round=number + 1)
            return NOTHING_ADDED
        await self.changes.install_plan(
            plan, reason=f"round {number + 1}: {feedback}", replan=False
        )
        ROUNDS.inc()
        rounds = number
        state.info = state.info.model_copy(update={"rounds": rounds})
        await self.io.write_session("rounds", rounds)
        await self.io.store.note_progress(self.io.sid, "round", round=number + 1)
        return None

    def answer_directly(self, reason: str) -> None:
        """End a goal that needs no tool without a plan: the summarizer answers it from the
        goal alone (the caller, say a router that found no tool needed, gives ``reason``)."""
        self.direct = reason
        self.state.end(SessionStatus.COMPLETED, "")
        log.info("session=%s answered with no plan: %s", self.io.sid, reason)

    async def conclusion(
        self,
        status: SessionStatus,
        reason: str = "",
        compensations: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """What the report adds for a session with an LLM: the answer (how it ended,
        ``reason`` for an end other than completed, and the ``compensations`` that ran), the
        critic's last verdict and the rounds run; empty without an LLM."""
        if self.deliberation.chat is None:
            return {}
        undone = compensations_text(compensations)
        out = await self._conclude(status, "; ".join(filter(None, [reason, undone])))
        # The loop has stopped: the critic's and summarizer's tokens reach the hash here.
        await self.io.write_session("llm_usage", self.state.fold_usage())
        return out

    async def _conclude(self, status: SessionStatus, reason: str) -> dict[str, Any]:
        state = self.state
        out: dict[str, Any] = {"rounds": state.info.rounds + 1}
        if self.critique is None:  # judged before a takeover: the hash kept the verdict
            judgement = await self._stored_judgement(state.info.plan_version)
            if judgement is not None:
                self.critique, self.ready = judgement.critique, judgement.answer
            else:
                stored = await self.io.store.session_field(self.io.sid, "critique")
                self.critique = Critique.model_validate_json(stored) if stored else None
        if self.critique is not None:
            out["critique"] = mask(self.critique.model_dump())
        if self.direct:
            out["answered_directly"] = mask_text(self.direct)
        await self.io.load_outputs(sorted(state.completed()))
        out["answer"] = mask((await self._answer(status, reason)).model_dump())
        return out

    async def _answer(self, status: SessionStatus, reason: str) -> SessionAnswer:
        """The session's answer: the plan's answer step when it fits, else the summarizer's
        (a partial one for a session that did not complete), else Planloop's own account
        when no LLM call may or can be made (a cancel, a spent budget, a failing endpoint)."""
        state, chat = self.state, self.deliberation.chat
        assert chat is not None
        schema = state.info.options.answer_schema
        completed = status == SessionStatus.COMPLETED
        outcome = "completed" if completed else ended_text(status, reason)
        stated = stated_answer(state) if completed else None
        if completed and self.ready is not None and stated is None:
            return self.ready
        if stated is not None:
            problem = schema_problem(stated.data, schema) if schema else None
            if problem is None:
                return stated
            outcome = (
                f"completed; the plan's answer step stated data that does not fit the "
                f"answer schema ({problem}): write the answer again so that it fits"
            )
        blocked = "cancelled by the user" if status == SessionStatus.CANCELLED else ""
        blocked = blocked or self._blocked()
        if not blocked:
            summarizer = Summarizer(chat, max_repairs=self.io.settings.plan_max_repairs)
            results = await self._results()
            try:
                answer, usages = await asyncio.to_thread(
                    summarizer.answer,
                    state.plan.goal or state.info.goal,
                    results,
                    critique_text(self.critique),
                    schema if completed else None,
                    outcome=outcome,
                    partial=not completed,
                )
            except LLMError as exc:
                log.warning("session=%s summarizer failed: %s", self.io.sid, exc)
                blocked = f"the summarizer failed: {exc}"
            else:
                record_usage(state.batch, usages)
                return answer
        log.info("session=%s answer written without the summarizer: %s", self.io.sid, blocked)
        if stated is not None:
            return stated.model_copy(update={"schema_error": problem})
        return SessionAnswer(
            text=account_text(state, outcome), partial=not completed, source="planloop"
        )
