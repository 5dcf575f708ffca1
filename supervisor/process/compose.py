"""The composition root of a supervisor's session loops: one function wires what they share.

The supervisor process calls it with its Redis store, SQL record and dispatcher; the unit
tests (tests/unit/loop_fixtures.py) call it with the in-memory store and stand-ins for the
record and the dispatcher, then wire a ``SessionRunner`` over a state with
``SessionRunner.wire``, as the supervisor's loop does over the state its start read: the loop
they drive is wired the way a supervisor wires it.
"""

from __future__ import annotations

from planloop.config.settings import Settings
from planloop.core.record import SqlRecord
from planloop.core.tools import ToolRegistry
from planloop.planner.llm import ChatModel
from planloop.supervisor.io.step_queue import Dispatcher
from planloop.supervisor.io.store_port import SessionStorePort
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.lessons import LessonMemory


def compose(
    settings: Settings,
    *,
    store: SessionStorePort,
    record: SqlRecord,
    dispatcher: Dispatcher,
    tools: ToolRegistry,
    name: str,
    chat: ChatModel | None = None,
    lessons: LessonMemory | None = None,
) -> SupervisorContext:
    """What every session loop of one supervisor shares (the event hub when Redis is behind
    ``store``: see :class:`SupervisorContext`)."""
    return SupervisorContext(
        settings=settings,
        store=store,
        record=record,
        dispatcher=dispatcher,
        tools=tools,
        name=name,
        chat=chat,
        lessons=lessons,
    )
