"""Errors about one session: :class:`SessionError` and its subclasses (the tree:
core/errors.py)."""

from __future__ import annotations

from planloop.core.error_base import PlanloopError, public


class SessionError(PlanloopError):
    """About one session."""

    def __init__(self, message: str, *, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(message)


class SessionNotFoundError(SessionError):
    """No session with that id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}", session_id=session_id)


class StepNotFoundError(SessionError):
    """No version of the session's plan has a step with that id."""

    def __init__(self, session_id: str, step_id: str) -> None:
        self.step_id = step_id
        super().__init__(
            f"session {session_id!r} has no step {step_id!r} in any plan version",
            session_id=session_id,
        )


class FencedOutError(SessionError):
    """A write carried epoch ``epoch``; the session has moved on to a newer owner."""

    def __init__(self, session_id: str, epoch: int) -> None:
        self.epoch = epoch
        super().__init__(
            f"session {session_id}: epoch {epoch} is stale, another supervisor owns it",
            session_id=session_id,
        )


class SessionEndedError(SessionError):
    """The session ended ``status``: ended is final, nothing reopens or rewrites it."""

    def __init__(self, session_id: str, status: str) -> None:
        self.status = status
        super().__init__(
            f"session {session_id} has ended ({status}); an ended session is never reopened",
            session_id=session_id,
        )


class CommandRefusedError(SessionError):
    """A person's ``command`` (retry, skip, approve) cannot apply to step ``step_id`` of the
    session (``None``: to the session itself), which is ``state`` (a step status, ``None``
    for a step that does not exist); ``reason`` says why. Nothing was sent."""

    def __init__(
        self,
        session_id: str,
        command: str,
        step_id: str | None,
        state: str | None,
        reason: str,
    ) -> None:
        self.command = command
        self.step_id = step_id
        self.state = state
        what = f"step {step_id!r} of session {session_id}" if step_id else f"session {session_id}"
        super().__init__(
            f"cannot {command} {what}: {reason} (nothing was sent)", session_id=session_id
        )


class SessionInputRefusedError(SessionError):
    """A session as stored breaks what the producer would have refused (``reason``): written
    by something other than Planloop's producer. It ends failed before anything runs; no
    crash is counted (it would fail the same way on every supervisor)."""

    def __init__(self, session_id: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"session {session_id} refused before it started: {reason}", session_id=session_id
        )


class StoredSessionError(SessionInputRefusedError, ValueError):
    """A session hash whose fields do not parse, or break a bound every entry point
    enforces (options out of range, NaN, not JSON): written past the producer. Raised by
    ``SessionRecord.from_fields``; the supervisor ends the session failed with it, without
    counting a crash. A ``ValueError`` too, like the pydantic error it replaces, so a
    reader that tolerated a bad hash still does."""

    def __init__(self, session_id: str, reason: str) -> None:
        self.reason = reason
        SessionError.__init__(
            self,
            f"session {session_id} cannot be loaded: its stored fields break the input check "
            f"({reason})",
            session_id=session_id,
        )


class HotStateLostError(SessionError):
    """The session's hot state vanished while it was being loaded (Redis lost its data)."""

    def __init__(self, session_id: str, what: str) -> None:
        super().__init__(
            f"session {session_id}: {what} vanished from Redis while the session was loaded "
            "(Redis lost its data); it is rebuilt from the SQL record if one was written",
            session_id=session_id,
        )


class PlanVersionNotFoundError(SessionError):
    """``planloop fork --version N``: the session has no plan version ``version``."""

    def __init__(self, session_id: str, version: int, latest: int) -> None:
        self.version, self.latest = version, latest
        super().__init__(
            f"session {session_id} has no plan version {version} (its versions are 1 to "
            f"{latest}); nothing was forked",
            session_id=session_id,
        )


class ContinueRefusedError(SessionError):
    """``planloop continue`` of a session that is not ``failed`` or ``aborted`` by its
    deadline or a budget (``status``: what it is, ``reason`` says why); nothing changed."""

    def __init__(self, session_id: str, status: str, reason: str) -> None:
        self.status, self.reason = status, reason
        super().__init__(
            f"cannot continue session {session_id} ({status}): {reason}; nothing changed",
            session_id=session_id,
        )


public(
    SessionError,
    PlanVersionNotFoundError,
    ContinueRefusedError,
    SessionNotFoundError,
    StepNotFoundError,
    FencedOutError,
    SessionEndedError,
    CommandRefusedError,
    SessionInputRefusedError,
    StoredSessionError,
    HotStateLostError,
)
