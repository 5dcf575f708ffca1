"""The supervisor process: takes sessions through leases and runs one loop per session."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from typing import cast

from config.settings import Settings
from core.keys import Keys
from core.models import SessionStatus
from core.record import SqlRecord
from core.tools import load_tools
from planner.llm import build_chat_model
from supervisor.context import SupervisorContext
from supervisor.dispatch import Dispatcher
from supervisor.poison import count_crash, end_crashed_session
from supervisor.rebuild import rebuild_lost_sessions
from supervisor.session import SessionRunner
from supervisor.session_base import describe_error
from supervisor.state import SessionStore

log = logging.getLogger(__name__)

REBUILD_INTERVAL_S = 2.0
GIL_SWITCH_INTERVAL_S = 0.0005


@dataclass
class Owned:
    """A session this process holds the lease of, and the task driving it."""

    token: str
    epoch: int
    task: asyncio.Task[None]


class Supervisor:
    """Owns sessions through leases; any number of supervisors may run side by side."""

    def __init__(self, settings: Settings, name: str | None = None) -> None:
        self.settings = settings
        self.name = name or f"sup-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tools = load_tools(settings.tool_modules)
        self.ctx = SupervisorContext(
            settings=settings,
            store=SessionStore.from_url(settings.redis_url, Keys(settings.key_prefix)),
            record=SqlRecord.from_url(settings.database_url),
            dispatcher=Dispatcher(settings, tools),
            tools=tools,
            name=self.name,
            chat=build_chat_model(settings) if settings.llm_base_url else None,
        )
        self.store = self.ctx.store
        self.owned: dict[str, Owned] = {}
        self._next_rebuild = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set.

        1. Make sure the inbox consumer group exists.
        2. Keep the leases of owned sessions alive (a task of its own; a lease that cannot
           be renewed stops its session loop at once).
        3. Until told to stop: take sessions announced on the inbox, and every reclaim
           interval take over active sessions whose lease expired.
        4. On stop: cancel the session loops and release their leases, so a peer resumes
           them without waiting for the leases to expire.
        """
        await self.store.ensure_inbox()
        keeper = asyncio.create_task(self._keep_leases(stop), name="leases")
        log.info("supervisor %s serving (prefix=%s)", self.name, self.settings.key_prefix)
        try:
            await self._reclaim()
            while not stop.is_set():
                block_ms = int(self.settings.reclaim_interval_s * 1000)
                entries = await self.store.read_inbox(self.name, block_ms)
                for _entry, sid in entries:
                    await self._take(sid)
                await self.store.ack_inbox([entry for entry, _ in entries])
                await self._reclaim()
        finally:
            keeper.cancel()
            await self._let_go()
            self.ctx.dispatcher.close()
            await self.store.r.aclose()

    async def _reclaim(self) -> None:
        """Take over active sessions nobody holds (their owner died or never came)."""
        self._forget_finished()
        now = time.monotonic()
        if now >= self._next_rebuild:
            # Rare and comparatively costly (a SQL query): Redis lost its data.
            self._next_rebuild = now + REBUILD_INTERVAL_S
            await rebuild_lost_sessions(self.ctx)
        candidates = [s for s in await self.store.active_sessions() if s not in self.owned]
        for sid in await self.store.unowned(candidates):
            await self._take(sid)

    async def _take(self, sid: str) -> None:
        if not sid or sid in self.owned:
            return
        status = cast(str | None, await self.store.r.hget(self.store.keys.session(sid), "status"))
        if status and SessionStatus(status).ended:  # ended is final: never taken again
            await self.store.r.srem(self.store.keys.active, sid)
            return
        token = f"{self.name}:{uuid.uuid4().hex}"
        epoch = await self.store.acquire_lease(sid, token, self.settings.lease_ttl_s, self.name)
        if not epoch:
            return
        runner = SessionRunner(self.ctx, sid, epoch)
        task = asyncio.create_task(self._drive(runner, token), name=f"session:{sid}")
        self.owned[sid] = Owned(token, epoch, task)

    async def _drive(self, runner: SessionRunner, token: str) -> None:
        sid = runner.sid
        try:
            await runner.run()
        except asyncio.CancelledError:
            await self.store.release_lease(sid, token)
            raise
        except Exception as exc:
            try:
                await self._after_crash(runner, token, exc)
            except Exception:  # Redis or SQL down as well: the lease expires, a peer retries
                log.exception("session=%s loop crashed and could not be counted", sid)
        else:
            await self.store.release_lease(sid, token)

    async def _after_crash(self, runner: SessionRunner, token: str, exc: Exception) -> None:
        """Count the crash; end the session at the limit (or if cancelled), else cool off.

        Keep the lease a while longer instead of releasing it: a session that crashes its
        loop would otherwise crash every supervisor in turn, as fast as they can take it.
        The cool-off doubles with each crash counted (across supervisors).
        """
        sid, error = runner.sid, describe_error(exc)
        crash = await count_crash(self.ctx, sid, error, exc)
        limit = self.settings.max_session_crashes
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
            await end_crashed_session(
                self.ctx, sid, runner.epoch, status=status, error=reason, cause=runner.applying
            )
            await self.store.release_lease(sid, token)
            return
        base, most = (
            self.settings.session_crash_cool_off_s,
            self.settings.session_crash_cool_off_max_s,
        )
        cool_off = min(most, base * 2 ** max(crash.count - 1, 0))
        log.exception(
            "session=%s loop crashed (%d of %d); retried in %.1fs",
            sid,
            crash.count,
            limit,
            cool_off,
        )
        await self.store.renew_leases([(sid, token)], cool_off)

    def _forget_finished(self) -> None:
        for sid in [s for s, o in self.owned.items() if o.task.done()]:
            del self.owned[sid]

    async def _keep_leases(self, stop: asyncio.Event) -> None:
        interval = self.settings.lease_ttl_s / 3
        while not stop.is_set():
            owned = [(sid, o.token) for sid, o in self.owned.items() if not o.task.done()]
            renewed = await self.store.renew_leases(owned, self.settings.lease_ttl_s)
            for (sid, _token), ok in zip(owned, renewed, strict=True):
                if not ok:
                    log.error("session=%s lease lost; stopping its loop at once", sid)
                    self.owned[sid].task.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def _let_go(self) -> None:
        for owned in self.owned.values():
            owned.task.cancel()
        for owned in self.owned.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await owned.task
        self.owned.clear()


def serve(settings: Settings) -> None:
    """Run a supervisor until SIGINT or SIGTERM."""
    import signal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await Supervisor(settings).run(stop)

    # The SQL thread must not hold the event loop off for the default 5 ms GIL slice: a
    # step's dependents are dispatched from the loop.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    asyncio.run(main())
