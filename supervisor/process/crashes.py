"""A session loop that crashed: counted, ended at the limit (or when cancelled), else cooled off.

The lease is held a while longer instead of released: a session that crashes its loop would
otherwise crash every supervisor in turn, as fast as they can take it. The cool-off doubles
with each crash counted (across supervisors).
"""

from __future__ import annotations

import logging

from planloop.core.errors import SessionInputRefusedError
from planloop.core.models import SessionStatus
from planloop.supervisor.io.redis_store import SessionStore
from planloop.supervisor.process.context import SupervisorContext
from planloop.supervisor.session.poison import count_crash, end_crashed_session
from planloop.supervisor.session.ports import describe_error

log = logging.getLogger(__name__)


async def settle_crash(
    ctx: SupervisorContext,
    store: SessionStore,
    sid: str,
    epoch: int,
    applying: tuple[str, dict[str, str]] | None,
    exc: Exception,
) -> float | None:
    """End the session (None: let its lease go) or the seconds to hold its lease first."""
    settings, error = ctx.settings, describe_error(exc)
    if isinstance(exc, SessionInputRefusedError):  # the same on every try: no crash
        log.warning("session=%s %s; ending it failed", sid, exc.reason)
        await end_crashed_session(
            ctx, sid, epoch, status=SessionStatus.FAILED, error=str(exc), cause=None
        )
        return None
    crash = await count_crash(store, sid, error, exc)
    limit = settings.max_session_crashes
    if crash.cancel is not None or crash.count >= limit:
        log.error(
            "session=%s loop crashed (%d of %d): %s; ending it",
            sid,
            crash.count,
            limit,
            error,
            exc_info=exc,
        )
        status = SessionStatus.CANCELLED if crash.cancel is not None else SessionStatus.FAILED
        reason = crash.cancel or f"the session's loop crashed {crash.count} times: {error}"
        await end_crashed_session(ctx, sid, epoch, status=status, error=reason, cause=applying)
        return None
    base, most = settings.session_crash_cool_off_s, settings.session_crash_cool_off_max_s
    cool_off = float(min(most, base * 2 ** max(crash.count - 1, 0)))
    log.error(
        "session=%s loop crashed (%d of %d); retried in %.1fs",
        sid,
        crash.count,
        limit,
        cool_off,
        exc_info=exc,
    )
    return cool_off
