"""Milestone reviews: a finished declared phase is announced on the stream, and
reviewed by the decision agent when reviews are on; without a review nothing waits on it."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from planloop.core.models import Event, EventType, SessionOptions, SessionStatus
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.session.loop import SessionRunner
from tests.unit.loop_fixtures import SID, run, step
from tests.unit.test_session_loop_turns import decisions, outcome, runner

T = TypeVar("T", bound=BaseModel)

PHASES = Plan(
    steps=[
        step("a1", phase="gather"),
        step("a2", phase="gather"),
        step("b", "a1", "a2", phase="decide"),
    ]
)


class Reviewer:
    """A decision agent that continues and keeps the prompts it was shown."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        assert role == Role.DECIDER
        self.prompts.append("\n".join(m["content"] for m in messages))
        answer = ReplanDecision(action=ReplanAction.CONTINUE, reasoning="on track")
        return schema.model_validate(answer.model_dump()), Usage(1, 1, 0.0, "m", role.value)


def milestones(store: MemorySessionStore) -> list[Event]:
    events = (Event.from_fields(f) for _, f in store.streams.get(store.keys.events(SID), []))
    return [e for e in events if e.type == EventType.MILESTONE_REACHED]


def run_all(loop: SessionRunner, store: MemorySessionStore) -> None:
    """Complete every step in order, deciding after each outcome as the loop does."""
    for wave in (["a1", "a2"], ["b"]):
        run(loop.scheduling.dispatch_ready())
        for step_id in wave:
            outcome(loop, store, step_id)
            run(loop.decisions.think())
    loop.decisions.check_end()


def test_a_finished_phase_is_announced_and_the_session_ends_without_reviews() -> None:
    loop, store = runner(PHASES)
    run_all(loop, store)
    assert [e.payload["phase"] for e in milestones(store)] == ["gather", "decide"]
    assert milestones(store)[0].payload["steps"] == ["a1", "a2"]
    assert loop.deliberation.pending == []  # nothing to decide about: no review without an LLM
    assert loop.state.outcome == (SessionStatus.COMPLETED, "")
    assert decisions(loop) == []


def test_with_reviews_on_each_finished_phase_is_reviewed_by_the_decider() -> None:
    loop, store = runner(PHASES)
    reviewer = Reviewer()
    loop.deliberation.chat = reviewer
    loop.state.info = loop.state.info.model_copy(
        update={"options": SessionOptions(milestone_reviews=True)}
    )
    run_all(loop, store)
    assert len(reviewer.prompts) == 2
    assert "milestone reached: proactive review" in reviewer.prompts[0]
    assert "phase 'gather' finished (2 steps)" in reviewer.prompts[0]
    rows = [(d["action"], d["source"]) for d in decisions(loop)]
    assert rows == [("CONTINUE", "llm"), ("CONTINUE", "llm")]
    assert loop.state.outcome == (SessionStatus.COMPLETED, "")


def test_reviews_need_an_llm_and_can_be_turned_off_per_session() -> None:
    loop, _ = runner(PHASES, milestone_reviews=True)
    assert not loop.deliberation.reviews_milestones  # no LLM: the rules have nothing to review
    loop.deliberation.chat = Reviewer()
    assert loop.deliberation.reviews_milestones
    loop.state.info = loop.state.info.model_copy(
        update={"options": SessionOptions(milestone_reviews=False)}
    )
    assert not loop.deliberation.reviews_milestones
