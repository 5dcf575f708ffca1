"""What every session loop of one supervisor process shares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from planloop.config.settings import Settings
from planloop.core.record import SqlRecord
from planloop.core.redis_client import redis_address
from planloop.core.tools import ToolRegistry
from planloop.planner.llm import ChatModel
from planloop.supervisor.io.event_hub import EventHub
from planloop.supervisor.io.group_commit import CheckpointWriter, ClaimBatcher
from planloop.supervisor.io.redis_store import SessionStore
from planloop.supervisor.io.step_queue import Dispatcher
from planloop.supervisor.io.store_port import SessionStorePort
from planloop.supervisor.process.admission import Admission
from planloop.supervisor.session.lessons import LessonMemory

T = TypeVar("T")


@dataclass
class SupervisorContext:
    """Settings, stores and clients of one supervisor process."""

    settings: Settings
    store: SessionStorePort  # the loops see the port; the process keeps its Redis store
    record: SqlRecord
    dispatcher: Dispatcher
    tools: ToolRegistry
    name: str
    chat: ChatModel | None = None
    lessons: LessonMemory | None = None  # Reflexion lessons; None: off or no LLM
    # One thread for SQL: SQLite allows one writer, and ordering keeps checkpoints simple.
    sql_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="sql")
    )
    # Sessions just taken start before the bookkeeping of those already running.
    admission: Admission = field(init=False)
    # The SQL writes of every session, grouped into one transaction per round.
    claims: ClaimBatcher = field(init=False)
    checkpoints: CheckpointWriter = field(init=False)
    # One XREADGROUP for the event streams of every held session (None: a store without
    # Redis behind it, as in unit tests; each session then reads its own stream).
    events: EventHub | None = field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(
            self.settings.admission_slots, self.settings.admission_max_defer_s
        )
        self.claims = ClaimBatcher(self.record, self.sql, self.settings.store_retry_interval_s)
        # A burst of sessions starting goes before checkpoint commits (process/admission.py).
        defer = self.admission.defer
        self.checkpoints = CheckpointWriter(self.settings, self.record, self.store, self.sql, defer)
        self.events = None
        if isinstance(self.store, SessionStore):
            self.events = EventHub(
                redis_address(self.settings),
                self.store.r,
                self.store.keys,
                self.name,
                self.settings.event_batch,
            )

    async def sql(self, func: Callable[[], T]) -> T:
        """Run a blocking SQL call off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.sql_pool, func)
