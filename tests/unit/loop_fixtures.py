"""A session's loop built without Redis, through the supervisor's composition root, for the
session-loop unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.catalogue import SensitiveNames
from planloop.core.models import StepState, StepStatus, StepTaskArgs
from planloop.core.record import Checkpoint
from planloop.core.tools import ToolContext, ToolRegistry, tool
from planloop.planner.plan import Plan, Step
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.process.compose import compose
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.loop import SessionRunner
from planloop.supervisor.session.state import SessionState

T = TypeVar("T")
SID, EPOCH = "s1", 3


class NoParams(BaseModel):
    pass


def _noop(params: Any, ctx: ToolContext) -> dict[str, Any]:
    return {}


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    for name in ("t.a", "t.b", "t.alt"):
        tool(name, description=name, params=NoParams, registry=reg)(_noop)
    return reg


def step(step_id: str, *deps: str, **kwargs: Any) -> Step:
    return Step(id=step_id, tool=kwargs.pop("tool", "t.a"), dependencies=list(deps), **kwargs)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Queue:
    """The task queue port: turns attempts into one LPUSH op each; remembers revocations."""

    def __init__(self, store: MemorySessionStore) -> None:
        self.store = store
        self.revoked: list[str] = []

    def route(self, step: Step) -> str | None:
        return step.queue or "q"  # every tool is served

    def commands(self, *attempts: StepTaskArgs) -> list[tuple[str, str, list[Any]]]:
        return [("LPUSH", "q", [f'{{"id": "{a.task_id}"}}']) for a in attempts]

    def revoke(self, task_ids: Iterable[str]) -> None:
        self.revoked += list(task_ids)


class Dispatcher(Queue):
    """The dispatcher's ports: task commands, revocation, sensitive names."""

    def __init__(self, store: MemorySessionStore) -> None:
        super().__init__(store)
        self.sensitive = SensitiveNames(registry())


class Record:
    """The SQL record's part the loop uses, keeping each committed batch."""

    def __init__(self) -> None:
        self.batches: list[Checkpoint] = []

    def checkpoint(self, sid: str, epoch: int, batch: Checkpoint) -> None:
        self.batches.append(batch)

    def checkpoint_many(self, batches: Sequence[tuple[str, int, Checkpoint]]) -> set[str]:
        self.batches += [batch for _, _, batch in batches]
        return set()

    def outputs(self, sid: str, refs: Sequence[str]) -> dict[str, str]:
        return {}

    def claim_many(self, claims: Sequence[Any]) -> list[None]:
        return [None] * len(claims)  # every claim recorded


def context(settings: Settings, store: MemorySessionStore) -> SupervisorContext:
    """The supervisor's composition root over the in-memory store and stand-ins."""
    return compose(
        settings,
        store=store,
        record=Record(),  # type: ignore[arg-type]
        dispatcher=Dispatcher(store),  # type: ignore[arg-type]
        tools=registry(),
        name="sup",
    )


def wired(ctx: SupervisorContext, state: SessionState) -> SessionRunner:
    """A session's loop over ``state``, wired as the supervisor wires one over the state its
    start read."""
    runner = SessionRunner(ctx, state.sid, state.epoch)
    runner.wire(state)
    return runner


class Loop:
    """One session's loop, composed as the supervisor composes it, over the in-memory store."""

    def __init__(self, plan: Plan, settings: Settings | None = None, **states: StepStatus):
        self.settings = settings or Settings(retry_backoff_s=1.0, retry_backoff_max_s=8.0)
        self.store = MemorySessionStore()
        self.store.own(SID, EPOCH, status="running", plan_version=1)
        self.ctx = context(self.settings, self.store)
        self.tools = self.ctx.tools
        self.state = state = SessionState(SID, EPOCH)  # what the start's read builds
        state.info = state.info.model_copy(update={"plan_version": 1})
        state.use_plan(plan)
        state.states = {
            s.id: StepState(status=states.get(s.id, StepStatus.PENDING)) for s in plan.steps
        }
        for st in state.states.values():
            if st.status != StepStatus.PENDING:
                st.attempt = 1
        state.reindex()
        self.runner = wired(self.ctx, state)
        self.io = self.runner.io
        self.queue: Dispatcher = self.ctx.dispatcher  # type: ignore[assignment]
        self.changes = self.runner.changes
        self.deliberation = self.runner.deliberation

    def decisions(self) -> list[dict[str, Any]]:
        """The loop's decisions: those committed to the record before they were carried out
        (as the supervisor's loop commits them), then those in the next checkpoint."""
        record: Record = self.ctx.record  # type: ignore[assignment]
        committed = [d for batch in record.batches for d in batch.decisions]
        return [*committed, *self.state.batch.decisions]

    def llm_calls(self) -> list[dict[str, Any]]:
        """The LLM calls recorded, committed with the decisions or in the next checkpoint."""
        record: Record = self.ctx.record  # type: ignore[assignment]
        committed = [c for batch in record.batches for c in batch.llm_calls]
        return [*committed, *self.state.batch.llm_calls]

    def step_hash(self, step_id: str) -> dict[str, str]:
        return self.store.hashes.get(self.store.keys.step(SID, step_id), {})

    def session_hash(self) -> dict[str, str]:
        return self.store.hashes[self.store.keys.session(SID)]
