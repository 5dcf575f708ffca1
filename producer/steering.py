"""What a person sends a running session: an approval, a retry or skip of a step, a cancel,
a signal; each checked here as the supervisor will apply it, and recorded with who asked."""

from __future__ import annotations

import getpass
import os

from planloop.config.settings import Settings
from planloop.core.errors import (
    CommandRefusedError,
    InputLimitError,
    SessionEndedError,
    SessionNotFoundError,
)
from planloop.core.hot_state import HotState
from planloop.core.input_limits import InputLimits
from planloop.core.models import Event, EventType, SessionRecord, SessionStatus, Severity
from planloop.core.step_commands import StepCommand, step_command_refusal
from planloop.planner import input_check
from planloop.planner.plan import Plan

# What ``approve --action`` may choose for a session whose re-plan budget is spent.
ACTIONS = ("continue", "replan_remaining", "replan_full", "abort")


def os_user() -> str:
    """Who runs this process, as the actor of what it asks for (no ``--as`` given)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a container user with no passwd entry and no $USER
        return f"uid {os.getuid()}"


class SessionSteering:
    """The steering half of :class:`planloop.producer.client.Producer`: it brings the
    settings and the hot state, this the commands a person sends."""

    settings: Settings
    state: HotState

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

    @property
    def limits(self) -> InputLimits:
        """This deployment's input limits (the one check: planner/input_check.py)."""
        return InputLimits.from_settings(self.settings)

    def _check_text(self, what: str, text: object) -> None:
        input_check.check_text(what, text, self.limits)
