"""Submitting sessions and sending them signals: everything a producer writes to Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, InputLimitError, UnknownToolError
from planloop.core.hot_state import HotState, connect
from planloop.core.keys import Keys
from planloop.core.live_tools import LiveTools
from planloop.core.models import SessionOptions, SessionRecord
from planloop.core.redis_client import redis_address
from planloop.core.seams import check_libraries
from planloop.core.tools import ToolRegistry, load_tools
from planloop.planner import input_check
from planloop.planner.plan import Plan
from planloop.planner.validation import validate_plan
from planloop.producer.lineage import SessionLineage
from planloop.producer.steering import ACTIONS, os_user

if TYPE_CHECKING:
    from planloop.core.record import SqlRecord

__all__ = ["ACTIONS", "CONNECT_TIMEOUT_S", "Producer", "new_session_id", "os_user"]

CONNECT_TIMEOUT_S = 5.0


def new_session_id() -> str:
    """Sortable, unique, short: creation time then randomness."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


@dataclass
class Producer(SessionLineage):
    """Submits plans and signals sessions; never talks to a supervisor directly."""

    settings: Settings
    state: HotState
    tools: ToolRegistry

    @cached_property
    def record(self) -> SqlRecord:
        """The durable record, opened once on first use (an engine and a schema check per
        read would leak connection pools in a long-running reader such as the console)."""
        from planloop.core.record import SqlRecord  # SQLAlchemy: only where SQL is read

        return SqlRecord.from_url(self.settings.database_url)

    def close(self) -> None:
        """Close the Redis connections and, if it was opened, the record's engine."""
        self.state.r.close()
        if "record" in vars(self):  # opened by cached_property
            self.record.engine.dispose()

    @classmethod
    def from_settings(
        cls, settings: Settings, *, on_local_catalogue: Callable[[str], None] | None = None
    ) -> Producer:
        """A producer on ``settings``' Redis whose plans are checked against the live tool
        catalogue (core/live_tools.py); with no live worker, against the bundled toolsets
        and ``PLANLOOP_TOOL_MODULES``, and ``on_local_catalogue`` is told so (default: a
        warning in the log).

        Raises:
            ToolModuleError: a module of ``PLANLOOP_TOOL_MODULES`` cannot be imported.
        """
        check_libraries("redis")  # the version its hooks were checked on (core/seams.py)
        # a person waits on this: an unreachable host is reported in seconds (exit 3)
        client = connect(redis_address(settings), connect_timeout_s=CONNECT_TIMEOUT_S)
        keys = Keys(settings.key_prefix)
        tools = LiveTools.from_redis(
            load_tools(settings.tool_modules),
            client,
            keys,
            max_age_s=settings.worker_heartbeat_s,
            on_local=on_local_catalogue,
            keep_last_on_fault=False,  # the command reports Redis unreachable (exit 3)
        )
        return cls(settings, HotState(client, keys), tools)

    def submit(
        self,
        plan: Plan,
        options: SessionOptions | None = None,
        *,
        check_workers: bool = False,
        wait_for_workers_s: float = 0.0,
        on_wait: Callable[[list[str]], None] | None = None,
    ) -> str:
        """Validate ``plan`` and hand it to the supervisors; returns the session id.

        The plan is checked as the supervisor will read it (its stored JSON through
        ``Plan.model_validate_json``) under this deployment's input limits. With
        ``check_workers`` (or a ``wait_for_workers_s``), every tool it uses must also be
        served by a live worker on the queue (their heartbeats, core/heartbeat.py), waiting
        up to ``wait_for_workers_s`` for one; ``on_wait`` is told the missing tools when
        waiting starts.

        Raises:
            PlanValidationError: the plan cannot run or breaks an input limit; nothing was
                enqueued.
            NoLiveWorkerError: a tool no live worker serves (in time); nothing was enqueued.
        """
        limits = self.limits
        plan_json = input_check.stored_plan(plan, limits)
        options = options or SessionOptions()
        input_check.check_options(options, limits)
        validate_plan(plan, self.tools)
        if check_workers or wait_for_workers_s > 0:
            from planloop.producer.liveness import required_tools

            self._wait_for_workers(required_tools(plan), wait_for_workers_s, on_wait)
        sid = new_session_id()
        self.state.create_session(
            sid,
            plan_json=plan_json,
            goal=plan.goal,
            options=options,
            checked=True,  # input_check.stored_plan validated this very text
        )
        return sid

    def submit_goal(
        self,
        goal: str,
        *,
        tools: list[str] | None = None,
        constraints: list[str] | None = None,
        options: SessionOptions | None = None,
        check_workers: bool = False,
        wait_for_workers_s: float = 0.0,
        on_wait: Callable[[list[str]], None] | None = None,
    ) -> str:
        """Hand a goal to the supervisors, whose LLM planner writes the plan.

        ``check_workers`` / ``wait_for_workers_s`` / ``on_wait`` as for :meth:`submit`: a live
        worker must serve some tool of each toolset in ``tools`` (any tool when none).

        Raises:
            ConfigError: no LLM endpoint is configured (the message says how to set one).
            UnknownToolError: a toolset prefix in ``tools`` matches no registered tool.
            NoLiveWorkerError: no live worker serves a toolset (in time); nothing was enqueued.
        """
        base = options or SessionOptions()
        input_check.check_goal(goal, constraints or [], self.limits)
        input_check.check_options(base, self.limits)
        if tools is not None and not isinstance(tools, list | tuple):
            raise InputLimitError("tools", "must be a list of toolset names")
        for prefix in tools or []:
            input_check.check_text("toolset", prefix, self.limits)
        if not self.settings.llm_base_url:
            from planloop.planner.openai_chat import NO_ENDPOINT_MESSAGE  # the chat client: 0.6 s

            raise ConfigError(NO_ENDPOINT_MESSAGE)
        prefixes = tools or []
        known = self.tools.known_names()  # served now, or local (its workers may start later)
        for prefix in prefixes:
            if not any(name.startswith(f"{prefix.rstrip('.')}.") for name in known):
                raise UnknownToolError(prefix, known)
        if check_workers or wait_for_workers_s > 0:
            from planloop.producer.liveness import goal_tools

            self._wait_for_workers(goal_tools(prefixes), wait_for_workers_s, on_wait)
        sid = new_session_id()
        self.state.create_session(
            sid,
            plan_json=None,
            goal=goal,
            options=base.model_copy(update={"tools": prefixes}),
            constraints=constraints or [],
        )
        return sid

    def session(self, sid: str) -> SessionRecord:
        return self.state.session(sid)

    def _wait_for_workers(
        self, tools: list[str], wait_s: float, on_wait: Callable[[list[str]], None] | None
    ) -> None:
        """Return once live workers on this queue serve ``tools``, waiting at most ``wait_s``.

        Raises:
            NoLiveWorkerError: a tool no live worker serves (in time).
        """
        from planloop.producer.liveness import wait_for_workers

        wait_for_workers(
            self.state.r,
            self.state.keys,
            self.settings.queue,
            tools,
            wait_s=wait_s,
            on_wait=on_wait,
        )

    def wait(self, sid: str, timeout_s: float | None = None, poll_s: float = 0.1) -> SessionRecord:
        """Block until the session ends (or ``timeout_s`` passes); returns its record."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            record = self.state.session(sid)
            if record.status.ended or (deadline is not None and time.monotonic() > deadline):
                return record
            time.sleep(poll_s)
