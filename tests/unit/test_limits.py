"""The LLM budget and the deadline, checked in one place before a model call: before a
decision a spent budget goes first, before a re-plan too little time left does."""

from __future__ import annotations

import time

from planloop.core.models import SessionOptions
from planloop.planner.decision import ReplanAction
from planloop.planner.plan import Plan
from planloop.supervisor.session.limits import past_limits
from planloop.supervisor.session.loop import SessionRunner
from tests.unit.loop_fixtures import step
from tests.unit.test_deadline_decisions import Chat
from tests.unit.test_session_loop_turns import runner


def session(*, spent: bool, short: bool, chat: bool = True) -> SessionRunner:
    loop, _ = runner(Plan(steps=[step("a")]), llm_timeout_s=60.0, session_max_tokens=100)
    started = time.time() - (590.0 if short else 0.0)
    loop.state.info = loop.state.info.model_copy(
        update={"options": SessionOptions(deadline_s=600.0), "started_at": started}
    )
    loop.state.llm_usage = {"m": [200, 0]} if spent else {}
    loop.deliberation.chat = Chat(ReplanAction.CONTINUE) if chat else None
    return loop


def test_within_both_limits_a_call_may_start() -> None:
    loop = session(spent=False, short=False)
    assert past_limits(loop.deliberation, []) is None
    assert past_limits(loop.deliberation, [], replanning=True) is None


def test_before_a_decision_a_spent_budget_goes_before_the_deadline() -> None:
    verdict = past_limits(session(spent=True, short=True).deliberation, [])
    assert verdict is not None
    assert (verdict.source, verdict.deadline_note) == ("budget", "")


def test_before_a_replan_the_deadline_goes_before_a_spent_budget() -> None:
    verdict = past_limits(session(spent=True, short=True).deliberation, [], replanning=True)
    assert verdict is not None
    assert verdict.source == "rule"
    assert verdict.deadline_note


def test_a_persons_decision_is_not_stopped_by_the_budget() -> None:
    loop = session(spent=True, short=False)
    assert past_limits(loop.deliberation, [], replanning=True, budget=False) is None


def test_without_an_llm_there_is_no_deadline_to_keep() -> None:
    loop = session(spent=False, short=True, chat=False)
    assert past_limits(loop.deliberation, []) is None
