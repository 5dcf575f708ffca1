"""A session's state and ports built without Redis, for the session-loop unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.catalogue import SensitiveNames
from planloop.core.models import StepState, StepStatus, StepTaskArgs
from planloop.core.tools import ToolContext, ToolRegistry, tool
from planloop.planner.plan import Plan, Step
from planloop.supervisor.io.memory_store import MemorySessionStore
from planloop.supervisor.session.changes import PlanChanges
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.ports import SessionIO
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


class Loop:
    """One session's state with the in-memory store behind it, and its collaborators."""

    def __init__(self, plan: Plan, settings: Settings | None = None, **states: StepStatus):
        self.settings = settings or Settings(retry_backoff_s=1.0, retry_backoff_max_s=8.0)
        self.tools = registry()
        self.store = MemorySessionStore()
        self.store.own(SID, EPOCH, status="running", plan_version=1)
        self.state = SessionState(SID, EPOCH)
        self.state.info = self.state.info.model_copy(update={"plan_version": 1})
        self.state.use_plan(plan)
        self.state.states = {
            s.id: StepState(status=states.get(s.id, StepStatus.PENDING)) for s in plan.steps
        }
        for st in self.state.states.values():
            if st.status != StepStatus.PENDING:
                st.attempt = 1
        self.state.reindex()
        self.io = SessionIO(self.state, self.store, self.settings, self.tools, consumer="sup")
        self.queue = Queue(self.store)
        self.changes = PlanChanges(self.io, self.queue.revoke)
        self.deliberation = Deliberation(
            self.state, self.settings, None, self.tools, SensitiveNames(self.tools)
        )

    def step_hash(self, step_id: str) -> dict[str, str]:
        return self.store.hashes.get(self.store.keys.step(SID, step_id), {})

    def session_hash(self) -> dict[str, str]:
        return self.store.hashes[self.store.keys.session(SID)]
