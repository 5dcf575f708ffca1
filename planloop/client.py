"""The synchronous Python client: submit, wait, stream, status, steer, fork and continue.

A thin layer over :class:`producer.client.Producer` (what ``planloop submit`` uses): it
talks to Redis only, never to a supervisor, and validates a plan exactly as the CLI does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

from pydantic import ValidationError

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, PlanLoadError, PlanloopError
from planloop.core.input_limits import InputLimits
from planloop.core.models import Event, SessionOptions, SessionRecord, SessionStatus, StepStatus
from planloop.core.settings_check import check_settings, load_settings, settings_error
from planloop.planner import input_check
from planloop.planner.plan import Plan, load_plan
from planloop.producer.client import Producer, os_user
from planloop.report import Report, build_report

PlanLike = Plan | Mapping[str, Any] | str | Path
"""A :class:`Plan`, its dict form, or the path of a YAML/JSON plan file."""

EVENT_BLOCK_MS = 500  # one XREAD waits at most this long, so an ended session is noticed


class WaitTimeoutError(PlanloopError):
    """A session did not end within the time :meth:`Client.wait` was given."""

    def __init__(self, sid: str, timeout_s: float, status: SessionStatus) -> None:
        self.sid, self.timeout_s, self.status = sid, timeout_s, status
        super().__init__(
            f"session {sid} still {status.value} after {timeout_s:g}s; wait again, "
            f"or stop it with Client.cancel({sid!r})"
        )


@dataclass(frozen=True)
class SessionEvent:
    """One entry of a session's event stream: its stream id and the event."""

    id: str
    event: Event


class Client:
    """A producer's handle on a Planloop deployment (Redis at ``settings.redis_url``).

    Example::

        with planloop.Client() as client:
            sid = client.submit("examples/diamond.yaml")
            report = client.wait(sid, timeout_s=60)
            print(report.status, report.outputs)
    """

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        """Settings come from ``PLANLOOP_*`` variables unless given; ``overrides`` replace
        single fields (``Client(redis_url="redis://host:6379/0")``).

        Raises:
            ConfigError: a setting that cannot work, named (``setting`` holds its
                ``PLANLOOP_*`` variable); the database URL is checked when the record is
                first read.
        """
        base = settings or load_settings()
        if overrides:  # validated like the PLANLOOP_* variables (model_copy checks nothing)
            try:
                base = Settings.model_validate({**base.model_dump(), **overrides})
            except ValidationError as exc:
                raise settings_error(exc) from None
        self.settings = base
        check_settings(self.settings, record=False)
        self._producer = Producer.from_settings(self.settings)

    # --- submitting -------------------------------------------------------------------
    def submit(
        self, plan: PlanLike, options: SessionOptions | None = None, **option_fields: Any
    ) -> str:
        """Validate ``plan`` and start a session running it; returns the session id.

        ``option_fields`` are :class:`SessionOptions` fields (``concurrency=4``,
        ``max_replans=1``, ...), merged over ``options``.

        Raises:
            PlanError: the plan cannot run (unknown tool, cycle, bad params, ...) or breaks
                an input limit; nothing was submitted.
            InputLimitError: its goal or constraints are too long.
            ConfigError: an option out of range, or an ``answer_schema`` that cannot be
                used (the error's ``setting`` names it).

        Every refusal is a :class:`PlanloopError` whose message names the field and the
        limit, never the value; the CLI and the console refuse exactly the same input.
        """
        return self._producer.submit(self._plan(plan), _options(options, option_fields))

    def submit_goal(
        self,
        goal: str,
        *,
        tools: list[str] | None = None,
        constraints: list[str] | None = None,
        mode: Literal["plan", "react", "auto"] = "auto",
        options: SessionOptions | None = None,
        **option_fields: Any,
    ) -> str:
        """Start a session whose plan an LLM writes for ``goal``; returns the session id.

        Raises:
            ConfigError: no LLM endpoint is configured (``PLANLOOP_LLM_BASE_URL``), or an
                option cannot be used.
            InputLimitError: the goal or a constraint breaks an input limit.
            UnknownToolError: a toolset prefix in ``tools`` matches no tool.
        """
        chosen = _options(options, {**option_fields, "mode": mode})
        return self._producer.submit_goal(
            goal, tools=tools, constraints=constraints, options=chosen
        )

    # --- following ----------------------------------------------------------------------
    def status(self, sid: str) -> SessionRecord:
        """The session as it is now (status, plan version, replans, owner, ...).

        Raises:
            SessionNotFoundError: no such session.
        """
        return self._producer.session(sid)

    def wait(self, sid: str, timeout_s: float | None = None, poll_s: float = 0.1) -> Report:
        """Block until the session ends; its report, with full step outputs and the answer.

        Raises:
            WaitTimeoutError: still running after ``timeout_s`` (it keeps running).
            SessionNotFoundError: no such session.
        """
        for name, value in (("timeout_s", timeout_s), ("poll_s", poll_s)):
            if value is not None and not (_is_finite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number of seconds", setting=name)
        record = self._producer.wait(sid, timeout_s=timeout_s, poll_s=poll_s)
        if not record.status.ended:
            raise WaitTimeoutError(sid, timeout_s or 0.0, record.status)
        return build_report(record, self._outputs(sid, record))

    def events(self, sid: str, *, after: str = "-", follow: bool = True) -> Iterator[SessionEvent]:
        """The session's events in order, from the one after ``after`` (a stream id).

        With ``follow`` the iterator waits for new events and stops once the session has
        ended and every event is read; without it, it stops at the last event there is.

        Raises:
            SessionNotFoundError: no such session.
        """
        state = self._producer.state
        key = state.keys.events(sid)
        last = "0-0" if after == "-" else after
        self.status(sid)  # raises SessionNotFoundError before anything is yielded
        while True:
            batch = cast(
                list[tuple[str, list[tuple[str, dict[str, str]]]]],
                state.r.xread({key: last}, count=500, block=EVENT_BLOCK_MS if follow else None),
            )
            entries = batch[0][1] if batch else []
            for entry_id, fields in entries:
                last = entry_id
                yield SessionEvent(entry_id, Event.from_fields(fields))
            if entries:
                continue
            if not follow or self.status(sid).status.ended:
                return

    # --- steering -----------------------------------------------------------------------
    # Every steering call records ``actor`` as who asked (default: this process's OS user).
    def cancel(
        self, sid: str, reason: str = "cancelled by user", *, actor: str | None = None
    ) -> SessionStatus:
        """Stop the session (compensations of completed writes run); the status it had.

        Raises:
            SessionNotFoundError: no such session.
            SessionEndedError: it has ended already.
        """
        return self._producer.cancel(sid, reason, actor=actor)

    def signal(
        self, sid: str, text: str, *, constraint: bool = True, actor: str | None = None
    ) -> str:
        """Tell a running session something new (a constraint unless ``constraint=False``);
        the event's stream id."""
        return self._producer.signal(sid, text, constraint=constraint, actor=actor)

    def approve(
        self,
        sid: str,
        *,
        step: str | None = None,
        action: str | None = None,
        note: str = "",
        actor: str | None = None,
    ) -> str:
        """Let ``step`` (marked ``requires_approval``) run, or choose the ``action``
        (continue, replan_remaining, replan_full, abort) of a session whose re-plan budget
        is spent; the event's stream id.

        Raises:
            ValueError: neither or both of ``step`` and ``action`` given.
            CommandRefusedError: no such step, a step that waits for no approval (not
                ``requires_approval``, approved already, started or finished), or an
                ``action`` for a session that waits for no decision; nothing was sent.
            SessionNotFoundError: no such session.
            SessionEndedError: it has ended already.
        """
        if (step is None) == (action is None):
            raise ValueError("give either step= or action=")
        return self._producer.approve(sid, action, note, step=step, actor=actor)

    def retry_step(self, sid: str, step: str, note: str = "", *, actor: str | None = None) -> str:
        """Run ``step``, which failed for good (or was interrupted), once more; its skipped
        dependents wait for it again. The event's stream id.

        Raises:
            CommandRefusedError: no such step, or one that is not failed or interrupted
                (the error's ``state`` says what it is); nothing was sent.
            SessionNotFoundError: no such session.
            SessionEndedError: it has ended already.
        """
        return self._producer.retry_step(sid, step, note, actor=actor)

    def skip_step(self, sid: str, step: str, note: str = "", *, actor: str | None = None) -> str:
        """Give up ``step`` (failed, or not started: an approval rejected): it and its
        dependents end skipped. The event's stream id.

        Raises:
            CommandRefusedError: no such step, or one that is running or has finished;
                nothing was sent.
            SessionNotFoundError: no such session.
            SessionEndedError: it has ended already.
        """
        return self._producer.skip_step(sid, step, note, actor=actor)

    # --- starting again ----------------------------------------------------------------
    def fork(
        self,
        sid: str,
        *,
        version: int | None = None,
        plan: PlanLike | None = None,
        actor: str | None = None,
    ) -> str:
        """Start a new session from plan version ``version`` of ``sid`` (default: its
        latest), or from an edited ``plan``; returns the new session's id. Completed steps
        the new plan keeps unchanged (same tool, params and dependencies, all of those
        carried too) start completed with the parent's outputs and are not run again.

        Raises:
            SessionNotFoundError: no such session.
            PlanVersionNotFoundError: it has no plan version ``version``.
            PlanError: the edited plan cannot run or breaks an input limit.
        """
        edited = self._plan(plan) if plan is not None else None
        return self._producer.fork(sid, version=version, plan=edited, actor=actor or os_user())

    def continue_session(
        self,
        sid: str,
        *,
        max_replans: int | None = None,
        deadline_s: float | None = None,
        max_tokens: int | None = None,
        actor: str | None = None,
    ) -> None:
        """Resume ``sid``, which ended failed or aborted by its deadline or a budget: the same
        session, at a new epoch; what completed stays completed, a write whose
        compensation ran is redone. ``max_replans``/``max_tokens``: what it may spend from
        now on; ``deadline_s``: seconds from now.

        Raises:
            SessionNotFoundError: no such session.
            ContinueRefusedError: it is running, or ended some other way (named).
        """
        self._producer.continue_session(
            sid,
            max_replans=max_replans,
            deadline_s=deadline_s,
            max_tokens=max_tokens,
            actor=actor or os_user(),
        )

    # --- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Close the Redis connections and the SQL record's engine."""
        self._producer.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- inside -------------------------------------------------------------------------
    def _plan(self, plan: PlanLike) -> Plan:
        if isinstance(plan, Plan):
            return plan
        limits = InputLimits.from_settings(self.settings)
        if isinstance(plan, str | Path):
            return load_plan(plan, limits=limits)
        if isinstance(plan, Mapping):
            return input_check.plan_from_data(plan, limits)
        raise PlanLoadError(
            f"a plan is a Plan, its dict form or a file's path, not {type(plan).__name__}"
        )

    def _outputs(self, sid: str, record: SessionRecord) -> dict[str, Any]:
        """Full outputs of the completed steps: from Redis, else the SQL record."""
        ids = [s["id"] for s in (record.report or {}).get("steps", [])]
        state = self._producer.state
        refs = {
            step_id: st.output_ref
            for step_id, st in state.steps(sid, ids).items()
            if st.output_ref and st.status is StepStatus.COMPLETED
        }
        found: dict[str, Any] = {}
        missing: dict[str, str] = {}
        for step_id, ref in refs.items():
            text = state.blob_text(ref)
            if text is None:
                missing[step_id] = ref
            else:
                found[step_id] = _json(text)
        if missing:
            stored = self._producer.record.outputs(sid, list(missing.values()))
            found.update(
                {step: _json(stored[ref]) for step, ref in missing.items() if ref in stored}
            )
        return found


def _json(text: str) -> Any:
    return json.loads(text)


def _options(options: SessionOptions | None, fields: Mapping[str, Any]) -> SessionOptions:
    return input_check.session_options(options, fields)


def _is_finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
