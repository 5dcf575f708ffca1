"""DEPENDENCY_BROKEN: with an LLM, a final failure that leaves a critical step
unable to run, or a reference that cannot resolve, reaches the decision agent as a CRITICAL
trigger before any branch is skipped; the rule path skips the branch as before."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from planloop.core.models import ErrorKind, Event, EventType, Severity, StepStatus
from planloop.planner.decision import ReplanAction, ReplanDecision
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.supervisor.session.loop import SessionRunner
from tests.unit.loop_fixtures import run, step
from tests.unit.test_session_loop_turns import decisions, outcome, runner

T = TypeVar("T", bound=BaseModel)


class Decides:
    """A decision agent that answers CONTINUE and remembers what it was shown."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.seen_states: list[dict[str, StepStatus]] = []
        self.loop: SessionRunner | None = None

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        assert role == Role.DECIDER
        self.prompts.append("\n".join(m["content"] for m in messages))
        if self.loop is not None:
            self.seen_states.append({i: s.status for i, s in self.loop.state.states.items()})
        decision = ReplanDecision(action=ReplanAction.CONTINUE, reasoning="go on", confidence=0.9)
        return schema.model_validate(decision.model_dump()), Usage(1, 1, 0.0, "m", role.value)


def with_llm(plan: Plan, **settings: Any) -> tuple[SessionRunner, Any, Decides]:
    loop, store = runner(plan, **settings)
    chat = Decides()
    chat.loop = loop
    loop.deliberation.chat = chat
    return loop, store, chat


BRANCH = Plan(steps=[step("a"), step("b", "a", critical=True), step("c")])


def test_a_broken_critical_dependency_reaches_the_decider_before_the_skip() -> None:
    loop, store, chat = with_llm(BRANCH, batch_react_size=5)
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.PERMANENT)
    broken = [e for e in loop.deliberation.pending if e.type == EventType.DEPENDENCY_BROKEN]
    assert [(e.severity, e.step_id, e.payload["critical"]) for e in broken] == [
        (Severity.CRITICAL, "a", ["b"])
    ]
    run(loop.decisions.think())  # c still runs: only the CRITICAL trigger decides now
    assert len(chat.prompts) == 1
    assert "DEPENDENCY_BROKEN" in chat.prompts[0]
    assert chat.seen_states[0]["b"] == StepStatus.PENDING  # not skipped before the decision
    assert loop.state.states["b"].status == StepStatus.SKIPPED  # CONTINUE skips it after
    made = decisions(loop)
    assert [(d["action"], d["source"]) for d in made] == [("CONTINUE", "llm")]


def test_a_failure_with_nothing_critical_downstream_raises_no_trigger() -> None:
    loop, store, _chat = with_llm(Plan(steps=[step("a"), step("b", "a"), step("c")]))
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.PERMANENT)
    assert [e.type for e in loop.deliberation.pending] == [EventType.TASK_FAILED]


def test_an_unresolvable_reference_is_a_critical_dependency_broken() -> None:
    plan = Plan(steps=[step("a"), step("b", "a", params={"x": "{{a.output.missing}}"})])
    loop, store, chat = with_llm(plan)
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a", value=1)
    run(loop.scheduling.dispatch_ready())  # b's reference cannot resolve: b fails at dispatch
    assert loop.state.states["b"].status == StepStatus.FAILED
    broken = [e for e in loop.deliberation.pending if e.type == EventType.DEPENDENCY_BROKEN]
    assert [(e.severity, e.payload["unresolved"]) for e in broken] == [(Severity.CRITICAL, True)]
    run(loop.decisions.think())
    assert len(chat.prompts) == 1


def test_the_rule_path_skips_the_branch_and_reports_it_after() -> None:
    loop, store = runner(BRANCH)
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "c")
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.PERMANENT)
    assert [e.type for e in loop.deliberation.pending] == [EventType.TASK_FAILED]
    run(loop.decisions.think())
    assert loop.state.states["b"].status == StepStatus.SKIPPED
    stream = store.streams[store.keys.events(loop.sid)]
    broken = [
        e
        for e in (Event.from_fields(f) for _, f in stream)
        if e.type == EventType.DEPENDENCY_BROKEN
    ]
    assert [(e.severity, e.payload["skipped"]) for e in broken] == [(Severity.INFO, ["b"])]
