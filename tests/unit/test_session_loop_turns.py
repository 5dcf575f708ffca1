"""Whole loop turns of a real ``SessionRunner`` over the in-memory store: dispatch, apply the
workers' outcomes, settle failures, deliberate, end. No Redis, no workers, no SQL."""

from __future__ import annotations

import time
from typing import Any

import pytest

from planloop.config.settings import Settings
from planloop.core.models import ErrorKind, Event, EventType, SessionStatus, StepState, StepStatus
from planloop.planner.plan import Plan
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.session import cancel_watch
from planloop.supervisor.session.cancel_watch import CANCEL_CHECK_INTERVAL_S
from planloop.supervisor.session.loop import SessionRunner
from planloop.supervisor.session.state import SessionState
from tests.unit.loop_fixtures import EPOCH, SID, Dispatcher, Record, context, run, step, wired


def runner(plan: Plan, **settings: Any) -> tuple[SessionRunner, MemorySessionStore]:
    store = MemorySessionStore()
    store.own(SID, EPOCH, status="running", plan_version=1)
    state = SessionState(SID, EPOCH)
    state.use_plan(plan)
    state.states = {s.id: StepState() for s in plan.steps}
    state.reindex()
    return wired(context(Settings(retry_backoff_s=0.0, **settings), store), state), store


def decisions(loop: SessionRunner) -> list[dict[str, Any]]:
    """The loop's decisions: those committed before they were carried out, then any the
    carrying out added to the next checkpoint (a rule's verdict standing in for it)."""
    record: Record = loop.ctx.record  # type: ignore[assignment]
    committed = [d for batch in record.batches for d in batch.decisions]
    return [*committed, *loop.state.batch.decisions]


def outcome(loop: SessionRunner, store: MemorySessionStore, step_id: str, **kw: Any) -> None:
    """A worker's outcome of the step's current attempt, read and applied by the loop."""
    kind = kw.pop("type", EventType.TASK_COMPLETED)
    attempt = loop.state.states[step_id].attempt
    store.add_event(SID, Event(type=kind, step_id=step_id, attempt=attempt, payload=kw))

    run(loop.events.apply(run(loop.events.wait())))


def queued(store: MemorySessionStore) -> int:
    return len(store.lists.get("q", []))


def test_steps_are_dispatched_as_their_dependencies_complete() -> None:
    loop, store = runner(Plan(steps=[step("a"), step("b", "a"), step("c")]))
    run(loop.scheduling.dispatch_ready())
    assert {i: st.status for i, st in loop.state.states.items()} == {
        "a": StepStatus.RUNNING,
        "b": StepStatus.PENDING,
        "c": StepStatus.RUNNING,
    }
    assert queued(store) == 2
    assert store.hashes[store.keys.step(SID, "a")]["status"] == "running"
    outcome(loop, store, "a")
    run(loop.scheduling.dispatch_ready())
    assert loop.state.states["b"].status == StepStatus.RUNNING
    assert queued(store) == 3


def test_a_transient_failure_is_retried_as_a_new_attempt() -> None:
    loop, store = runner(Plan(steps=[step("a")]), default_max_retries=1)
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.TRANSIENT)
    assert loop.state.states["a"].status == StepStatus.READY
    run(loop.scheduling.dispatch_ready())
    assert (loop.state.states["a"].status, loop.state.states["a"].attempt) == (
        StepStatus.RUNNING,
        2,
    )


def test_a_final_failure_skips_its_branch_and_the_session_completes_around_it() -> None:
    loop, store = runner(Plan(steps=[step("a"), step("b", "a"), step("c")]))
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "c")
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.PERMANENT)
    assert [e.step_id for e in loop.deliberation.pending] == ["a"]
    run(loop.decisions.think())  # nothing else can run: the rule policy decides now
    assert loop.state.states["b"].status == StepStatus.SKIPPED
    loop.decisions.check_end()
    assert loop.state.outcome == (SessionStatus.COMPLETED, "completed around failed steps: a")
    made = decisions(loop)
    assert [(d["action"], d["source"]) for d in made] == [("CONTINUE", "rule")]


def test_a_critical_failure_fails_the_session() -> None:
    loop, store = runner(Plan(steps=[step("a", critical=True), step("b")]))
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.PERMANENT)
    run(loop.decisions.think())
    assert loop.state.outcome is not None
    assert loop.state.outcome[0] == SessionStatus.FAILED


def test_a_cancel_command_ends_the_session_cancelled() -> None:
    loop, store = runner(Plan(steps=[step("a")]))
    store.add_event(
        SID,
        Event(type=EventType.EXTERNAL_SIGNAL, description="stop", payload={"command": "cancel"}),
    )
    run(loop.events.apply(run(loop.events.wait())))
    assert loop.state.outcome == (SessionStatus.CANCELLED, "stop")


def test_events_delivered_too_often_go_to_the_dead_letters_on_takeover() -> None:
    loop, store = runner(Plan(steps=[step("a")]), max_deliveries=2)
    store.add_event(SID, Event(type=EventType.EXTERNAL_SIGNAL, description="late"))
    run(store.read_events(SID, "old", count=10, block_ms=1))  # a former owner read it
    run(store.claim_pending(SID, "older"))  # and another before that: delivered twice
    assert run(loop.start.take_over_pending(loop.state)) == []
    assert [cause for _, _, cause in store.dead] == ["delivered more than 2 times"]
    assert [e.description for _, e in loop.state.batch.events] == ["late"]


def test_a_step_whose_worker_lacks_the_tool_fails_the_session() -> None:
    # it once ended "completed" around the failed step, exit 0
    loop, store = runner(Plan(steps=[step("a"), step("b", "a"), step("c")]))
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "c")
    outcome(loop, store, "a", type=EventType.TASK_FAILED, error_kind=ErrorKind.UNSERVED)
    run(loop.decisions.think())
    loop.decisions.check_end()
    assert loop.state.outcome is not None
    status, error = loop.state.outcome
    assert status == SessionStatus.FAILED
    assert error.startswith("no worker serves t.a (steps a)")
    assert "PLANLOOP_TOOL_MODULES" in error


def command(loop: SessionRunner, store: MemorySessionStore, **payload: str) -> None:
    """A person's command, appended straight to the stream (as if the producer's check
    passed and the step moved on before the owner read it), read and applied."""
    store.add_event(SID, Event(type=EventType.EXTERNAL_SIGNAL, payload=payload))
    run(loop.events.apply(run(loop.events.wait())))


def test_the_owner_ignores_step_commands_the_state_no_longer_allows() -> None:
    loop, store = runner(Plan(steps=[step("a"), step("b", requires_approval=True)]))
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a")  # completed, then a retry and a skip arrive for it
    command(loop, store, command="retry", step="a")
    command(loop, store, command="skip", step="a")
    command(loop, store, command="retry", step="nope")
    command(loop, store, command="approve", step="a")  # needs no approval
    assert loop.state.states["a"].status == StepStatus.COMPLETED
    assert loop.state.states["a"].attempt == 1
    assert "nope" not in loop.state.states
    assert loop.state.approved == set()

    command(loop, store, command="approve", step="b")  # what applies is carried out
    assert loop.state.approved == {"b"}


class Unserved(Dispatcher):
    """A dispatcher whose live workers serve every tool but ``t.b``, until ``served``."""

    served = False

    def route(self, step: Any) -> str | None:
        return "q" if step.tool != "t.b" or self.served else None


def pooled_runner(plan: Plan, **settings: Any) -> tuple[SessionRunner, MemorySessionStore]:
    loop, store = runner(plan, **settings)
    loop.scheduling.queue = Unserved(store)
    return loop, store


def warnings_of(store: MemorySessionStore) -> list[Event]:
    return [
        ev
        for _, fields in store.streams.get(store.keys.events(SID), [])
        if (ev := Event.from_fields(fields)).severity == "WARNING"
        and ev.payload.get("notice") == "unserved"
    ]


def test_a_step_no_live_worker_serves_waits_with_one_warning_then_runs() -> None:
    plan = Plan(steps=[step("a"), step("b", tool="t.b"), step("b2", "a", tool="t.b")])
    loop, store = pooled_runner(plan)
    run(loop.scheduling.dispatch_ready())
    states = loop.state.states
    assert states["a"].status == StepStatus.RUNNING
    assert states["b"].status != StepStatus.RUNNING
    assert queued(store) == 1  # only a's message: b is never sent to a worker lacking t.b
    outcome(loop, store, "a")
    run(loop.scheduling.dispatch_ready())  # b2 is ready too now: it waits without a warning
    run(loop.scheduling.dispatch_ready())
    (warning,) = warnings_of(store)
    assert "t.b" in warning.description
    assert warning.step_id == "b"
    assert "t.b" in states["b2"].note
    assert [kind for _, kind, _ in store.progress if "served" in kind] == ["unserved"]

    loop.scheduling.queue.served = True  # type: ignore[attr-defined]
    run(loop.scheduling.dispatch_ready())
    assert states["b"].status == states["b2"].status == StepStatus.RUNNING
    assert states["b"].queue == "q"
    assert [kind for _, kind, _ in store.progress if "served" in kind] == ["unserved", "served"]


def test_a_step_no_live_worker_serves_fails_unserved_when_its_wait_ends() -> None:
    loop, store = pooled_runner(Plan(steps=[step("a"), step("b", tool="t.b")]), unserved_wait_s=5)
    run(loop.scheduling.dispatch_ready())
    outcome(loop, store, "a")
    run(loop.scheduling.dispatch_ready())
    assert loop.state.states["b"].status != StepStatus.FAILED  # still within its wait
    loop.scheduling.waiting["b"] -= 5  # as if it had waited out unserved_wait_s
    run(loop.scheduling.dispatch_ready())
    b = loop.state.states["b"]
    assert b.status == StepStatus.FAILED
    assert b.error_kind == ErrorKind.UNSERVED
    assert "no live worker serves t.b" in b.error
    run(loop.decisions.think())
    loop.decisions.check_end()
    assert loop.state.outcome is not None
    status, error = loop.state.outcome
    assert status == SessionStatus.FAILED
    assert error.startswith("no worker serves t.b (steps b)")


def test_a_cancel_field_found_at_the_first_look_wins_over_the_first_dispatch() -> None:
    loop, store = runner(Plan(steps=[step("a")]))
    store.hashes[store.keys.session(SID)]["cancel_requested"] = "stop"
    assert run(loop._send()) is False
    assert loop.state.outcome == (SessionStatus.CANCELLED, "stop")
    assert queued(store) == 0


def test_a_later_look_at_the_cancel_field_comes_after_the_turns_dispatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The look is a round trip: before the dispatch it held up the steps just released.
    loop, store = runner(Plan(steps=[step("a"), step("b", "a")]))
    assert run(loop._send()) is True  # the first look found nothing; a is sent
    store.hashes[store.keys.session(SID)]["cancel_requested"] = "stop"
    outcome(loop, store, "a")
    later = time.monotonic() + 2 * CANCEL_CHECK_INTERVAL_S
    monkeypatch.setattr(cancel_watch.time, "monotonic", lambda: later)
    assert run(loop._send()) is False
    assert loop.state.states["b"].status == StepStatus.RUNNING  # sent, then the look
    assert loop.state.outcome == (SessionStatus.CANCELLED, "stop")
