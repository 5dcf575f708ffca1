"""Submitting sessions and sending them signals: everything a producer writes to Redis."""

from __future__ import annotations

import getpass
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from planloop.config.settings import Settings
from planloop.core.errors import (
    CommandRefusedError,
    ConfigError,
    InputLimitError,
    SessionEndedError,
    SessionNotFoundError,
    UnknownToolError,
)
from planloop.core.hot_state import HotState, connect
from planloop.core.input_limits import InputLimits
from planloop.core.keys import Keys
from planloop.core.live_tools import LiveTools
from planloop.core.models import (
    Event,
    EventType,
    SessionOptions,
    SessionRecord,
    SessionStatus,
    Severity,
)
from planloop.core.seams import check_libraries
from planloop.core.step_commands import StepCommand, step_command_refusal
from planloop.core.tools import ToolRegistry, load_tools
from planloop.planner import input_check
from planloop.planner.plan import Plan
from planloop.planner.validation import validate_plan

if TYPE_CHECKING:
    from planloop.core.record import SqlRecord

CONNECT_TIMEOUT_S = 5.0
# What ``approve --action`` may choose for a session whose re-plan budget is spent.
ACTIONS = ("continue", "replan_remaining", "replan_full", "abort")


def os_user() -> str:
    """Who runs this process, as the actor of what it asks for (no ``--as`` given)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a container user with no passwd entry and no $USER
        return f"uid {os.getuid()}"


def new_session_id() -> str:
    """Sortable, unique, short: creation time then randomness."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


@dataclass
class Producer:
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
        client = connect(settings.redis_url, connect_timeout_s=CONNECT_TIMEOUT_S)
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
            from planloop.planner.llm import NO_ENDPOINT_MESSAGE  # the LLM client: 0.6 s of imports

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

    def approve(
        self,
        sid: str,
        action: str | None = None,
        note: str = "",
        *,
        step: str | None = None,
        actor: str | None = None,
    ) -> str:
        """Answer a session waiting for a person: let ``step`` (``requires_approval``) run,
        or choose the ``action`` of a session whose re-plan budget is spent. ``actor`` is
        who answers, for the record (default: this process's OS user).

        Raises:
            SessionNotFoundError: no such session; nothing was appended.
            SessionEndedError: the session has ended; nothing was appended.
            CommandRefusedError: no such step, or one that is not waiting for an approval
                (or, for ``action``, a session that waits for no decision); nothing was
                appended.
        """
        self._check_text("note", note)
        if action is not None and (not isinstance(action, str) or action.lower() not in ACTIONS):
            raise InputLimitError("action", f"must be one of {', '.join(ACTIONS)}")
        payload: dict[str, str] = {"command": "approve"}
        if step:
            self._check_step_command(sid, StepCommand.APPROVE, step)
            payload["step"] = step
        else:
            self._check_waits_for_decision(sid)
        if action:
            payload["action"] = action.upper()
        return self._tell(
            sid,
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                severity=Severity.INFO,
                description=note,
                payload=payload,
                actor=actor or os_user(),
            ),
        )

    def retry_step(self, sid: str, step: str, note: str = "", *, actor: str | None = None) -> str:
        """Run a step that failed for good once more (its skipped dependents wait for it
        again); the session's owner carries it out like an approval.

        Raises:
            SessionNotFoundError, SessionEndedError: as for :meth:`approve`.
            CommandRefusedError: no such step, or one that is not failed or interrupted;
                nothing was appended.
        """
        return self._step_command(sid, StepCommand.RETRY, step, note, actor)

    def skip_step(self, sid: str, step: str, note: str = "", *, actor: str | None = None) -> str:
        """Give up a failed step, or one that has not started (an approval rejected): it
        and its dependents end skipped.

        Raises:
            SessionNotFoundError, SessionEndedError: as for :meth:`approve`.
            CommandRefusedError: no such step, or one that is running or has finished;
                nothing was appended.
        """
        return self._step_command(sid, StepCommand.SKIP, step, note, actor)

    def _check_step_command(self, sid: str, command: StepCommand, step: str) -> None:
        """Refuse ``command`` where it cannot apply to ``step`` as the session stands now
        (core/step_commands.py; the supervisor applies the same rule when it arrives)."""
        self._check_text("step", step)
        record = self._live_session(sid)
        raw = self.state.plan_json(sid, record.plan_version)
        plan = Plan.model_validate_json(raw) if raw else None
        spec = plan.by_id.get(step) if plan is not None else None
        status = self.state.steps(sid, [step])[step].status if spec is not None else None
        refusal = step_command_refusal(
            command,
            status,
            requires_approval=bool(spec and spec.requires_approval),
            approved=step in record.approved,
        )
        if refusal is None:
            return
        if plan is None:
            refusal = "the session has no plan yet"
        elif spec is None:
            refusal += f" (its steps: {', '.join(s.id for s in plan.steps)})"
        raise CommandRefusedError(
            sid, command.value, step, status.value if status else None, refusal
        )

    def _check_waits_for_decision(self, sid: str) -> None:
        """Refuse ``approve --action`` unless the session parked changes for a person."""
        record = self._live_session(sid)
        if not record.awaiting:
            raise CommandRefusedError(
                sid,
                "approve",
                None,
                record.status.value,
                f"it is {record.status.value} and waits for no decision (an action answers a "
                "session whose re-plan budget is spent)",
            )

    def _live_session(self, sid: str) -> SessionRecord:
        """The session's record, refusing an ended one (ended is final)."""
        record = self.state.session(sid)  # raises SessionNotFoundError
        if record.status.ended:
            raise SessionEndedError(sid, record.status.value)
        return record

    def _step_command(
        self, sid: str, command: StepCommand, step: str, note: str, actor: str | None
    ) -> str:
        self._check_text("note", note)
        self._check_step_command(sid, command, step)
        return self._tell(
            sid,
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                severity=Severity.INFO,
                description=note,
                payload={"command": command.value, "step": step},
                actor=actor or os_user(),
            ),
        )

    def session(self, sid: str) -> SessionRecord:
        return self.state.session(sid)

    def cancel(
        self, sid: str, reason: str = "cancelled by user", *, actor: str | None = None
    ) -> SessionStatus:
        """Ask the session to stop; returns the status it had (``pending``: never started).

        The request is a field of the session hash (``cancel_requested``) as well as an
        event, in one transaction: the owner checks the field before it loads anything else
        and on every turn, so a cancel wins even over a session whose events or plan cannot
        be read, and a session nobody took yet is cancelled when a supervisor takes it.

        Raises:
            SessionNotFoundError: no such session; nothing was written.
            SessionEndedError: the session has ended already (ended is final).
            InputLimitError: the reason breaks an input limit; nothing was written.
        """
        self._check_text("cancel reason", reason)
        key = self.state.keys.session(sid)
        status = self.state.r.hget(key, "status")
        if status is None:
            raise SessionNotFoundError(sid)
        if SessionStatus(str(status)).ended:
            raise SessionEndedError(sid, str(status))
        event = Event(
            type=EventType.EXTERNAL_SIGNAL,
            severity=Severity.CRITICAL,
            description=reason,
            payload={"command": "cancel"},
            actor=actor or os_user(),
        )
        pipe = self.state.r.pipeline(transaction=True)
        pipe.hset(key, "cancel_requested", reason or "cancelled by user")
        pipe.xadd(self.state.keys.events(sid), event.to_fields())  # type: ignore[arg-type]
        pipe.execute()
        return SessionStatus(str(status))

    def signal(
        self, sid: str, text: str, *, constraint: bool = True, actor: str | None = None
    ) -> str:
        """Tell a running session something new (a constraint or a plain signal), as
        ``actor`` (default: this process's OS user).

        Raises:
            SessionNotFoundError, SessionEndedError: as for :meth:`approve`.
            InputLimitError: the text breaks an input limit; nothing is appended.
        """
        self._check_text("signal text", text)  # before the Event model sees it
        kind = EventType.NEW_CONSTRAINT if constraint else EventType.EXTERNAL_SIGNAL
        # A person spoke: the session should think about it at once, not in a batch.
        return self._tell(
            sid,
            Event(
                type=kind,
                severity=Severity.CRITICAL,
                description=text,
                payload={"text": text},
                actor=actor or os_user(),
            ),
        )

    def _tell(self, sid: str, event: Event) -> str:
        """Append a person's event to an existing session's stream; its entry id.

        Raises:
            InputLimitError: the text breaks an input limit; nothing is appended.
            SessionNotFoundError, SessionEndedError: nothing is appended (ended is final:
                nothing a person sends can apply to it).
        """
        input_check.check_signal(event.payload, event.description, self.limits)
        self._live_session(sid)
        return self.state.append_event(sid, event)

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

    @property
    def limits(self) -> InputLimits:
        """This deployment's input limits (the one check: planner/input_check.py)."""
        return InputLimits.from_settings(self.settings)

    def _check_text(self, what: str, text: object) -> None:
        input_check.check_text(what, text, self.limits)

    def wait(self, sid: str, timeout_s: float | None = None, poll_s: float = 0.1) -> SessionRecord:
        """Block until the session ends (or ``timeout_s`` passes); returns its record."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            record = self.state.session(sid)
            if record.status.ended or (deadline is not None and time.monotonic() > deadline):
                return record
            time.sleep(poll_s)
