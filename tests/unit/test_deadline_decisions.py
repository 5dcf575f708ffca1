"""The deadline is checked before each LLM call: with less time left than one call may take,
no decision agent and no re-planner is asked; the rule policy decides and says so."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from planloop.core.models import (
    ErrorKind,
    Event,
    EventType,
    SessionOptions,
    SessionStatus,
    StepStatus,
)
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.session.deadline import DEADLINE_NEAR, short_of_time
from planloop.supervisor.session.loop import SessionRunner
from tests.unit.loop_fixtures import SID, run, step
from tests.unit.test_session_loop_turns import decisions, outcome, runner

T = TypeVar("T", bound=BaseModel)


class Chat:
    """A model that answers the decider with ``action`` (running ``during`` meanwhile, a
    slow call) and fails the test if anything else is asked."""

    def __init__(self, action: ReplanAction, during: Callable[[], None] = lambda: None) -> None:
        self.action, self.during = action, during
        self.roles: list[Role] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        self.roles.append(role)
        assert role == Role.DECIDER, f"no {role} call was expected"
        self.during()
        answer = ReplanDecision(action=self.action, reasoning="llm says so", confidence=0.9)
        return schema.model_validate(answer.model_dump()), Usage(1, 1, 0.0, "m", role.value)


def session(plan: Plan, deadline_s: float, chat: Chat) -> tuple[SessionRunner, MemorySessionStore]:
    loop, store = runner(plan, llm_timeout_s=60.0)
    loop.state.info = loop.state.info.model_copy(
        update={"options": SessionOptions(deadline_s=deadline_s), "started_at": time.time()}
    )
    loop.deliberation.chat = chat
    return loop, store


def fail(loop: SessionRunner, store: MemorySessionStore, step_id: str) -> None:
    outcome(loop, store, step_id, type=EventType.TASK_FAILED, error_kind=ErrorKind.PERMANENT)


def notices(store: MemorySessionStore) -> list[Event]:
    events = (Event.from_fields(f) for _, f in store.streams[store.keys.events(SID)])
    return [e for e in events if e.payload.get("notice") == DEADLINE_NEAR]


CRITICAL = Plan(steps=[step("a", critical=True), step("b", "a")])


def test_short_of_time_only_under_a_deadline_closer_than_one_llm_call() -> None:
    loop, _ = session(CRITICAL, 600.0, Chat(ReplanAction.CONTINUE))
    now = loop.state.info.started_at
    assert short_of_time(loop.state, loop.ctx.settings, now) == ""
    assert short_of_time(loop.state, loop.ctx.settings, now + 590) != ""
    loop.state.info = loop.state.info.model_copy(update={"options": SessionOptions()})
    assert short_of_time(loop.state, loop.ctx.settings, now + 10_000) == ""  # no deadline


def test_too_little_time_left_the_rules_decide_without_asking_the_llm() -> None:
    chat = Chat(ReplanAction.REPLAN_FULL)
    loop, store = session(CRITICAL, 30.0, chat)  # 30 s left < the 60 s an LLM call may take
    run(loop.scheduling.dispatch_ready())
    fail(loop, store, "a")
    run(loop.decisions.think())
    assert chat.roles == []
    assert loop.state.outcome is not None
    assert loop.state.outcome[0] == SessionStatus.FAILED  # the rule policy's answer
    (row,) = decisions(loop)
    assert (row["action"], row["source"]) == ("ABORT", "rule")
    assert "left before the session deadline" in row["reasoning"]
    assert [e.type for e in notices(store)] == [EventType.EXTERNAL_SIGNAL]
    assert DEADLINE_NEAR in [kind for _, kind, _ in store.progress]


def test_a_replan_is_not_started_when_the_decision_used_up_the_time() -> None:
    plan = Plan(steps=[step("a"), step("b", "a"), step("c")])
    holder: list[SessionRunner] = []

    def slow_call() -> None:  # the decider's answer came back 9.5 minutes later
        state = holder[0].state
        state.info = state.info.model_copy(update={"started_at": state.info.started_at - 570})

    chat = Chat(ReplanAction.REPLAN_REMAINING, during=slow_call)
    loop, store = session(plan, 600.0, chat)
    holder.append(loop)
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "c")
    fail(loop, store, "a")
    run(loop.decisions.think())
    assert chat.roles == [Role.DECIDER]  # asked in time; the re-planner never
    rows = [(d["action"], d["source"]) for d in decisions(loop)]
    assert rows == [("REPLAN_REMAINING", "llm"), ("CONTINUE", "rule")]
    assert loop.state.states["b"].status == StepStatus.SKIPPED
    assert loop.state.info.plan_version == 1  # no new plan version
    assert len(notices(store)) == 1


def test_plenty_of_time_the_llm_decides() -> None:
    chat = Chat(ReplanAction.ABORT)
    loop, store = session(CRITICAL, 3600.0, chat)
    run(loop.scheduling.dispatch_ready())
    fail(loop, store, "a")
    run(loop.decisions.think())
    assert chat.roles == [Role.DECIDER]
    assert loop.state.outcome is not None
    assert loop.state.outcome[0] == SessionStatus.ABORTED
    assert notices(store) == []
