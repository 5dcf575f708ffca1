"""The asyncio client: :class:`planloop.Client`'s calls as coroutines.

Each call runs the synchronous client in a worker thread (``asyncio.to_thread``), so an
event loop never blocks on Redis and both clients validate and submit through the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Literal

from planloop.client import Client, PlanLike, SessionEvent
from planloop.config.settings import Settings
from planloop.core.models import SessionOptions, SessionRecord, SessionStatus
from planloop.report import Report


class AsyncClient:
    """``await``-able twin of :class:`planloop.Client`.

    Example::

        async with planloop.AsyncClient() as client:
            sid = await client.submit("examples/diamond.yaml")
            async for item in client.events(sid):
                print(item.event.type, item.event.step_id)
            report = await client.wait(sid)
    """

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        self.sync = Client(settings, **overrides)

    async def submit(
        self, plan: PlanLike, options: SessionOptions | None = None, **option_fields: Any
    ) -> str:
        """See :meth:`Client.submit`."""
        return await asyncio.to_thread(self.sync.submit, plan, options, **option_fields)

    async def submit_goal(
        self,
        goal: str,
        *,
        tools: list[str] | None = None,
        constraints: list[str] | None = None,
        mode: Literal["plan", "react", "auto"] = "auto",
        options: SessionOptions | None = None,
        **option_fields: Any,
    ) -> str:
        """See :meth:`Client.submit_goal`."""
        return await asyncio.to_thread(
            self.sync.submit_goal,
            goal,
            tools=tools,
            constraints=constraints,
            mode=mode,
            options=options,
            **option_fields,
        )

    async def status(self, sid: str) -> SessionRecord:
        """See :meth:`Client.status`."""
        return await asyncio.to_thread(self.sync.status, sid)

    async def wait(self, sid: str, timeout_s: float | None = None, poll_s: float = 0.1) -> Report:
        """See :meth:`Client.wait`."""
        return await asyncio.to_thread(self.sync.wait, sid, timeout_s, poll_s)

    async def events(
        self, sid: str, *, after: str = "-", follow: bool = True
    ) -> AsyncIterator[SessionEvent]:
        """See :meth:`Client.events`; each blocking read runs in a worker thread."""
        iterator = self.sync.events(sid, after=after, follow=follow)
        done = object()
        while True:
            item = await asyncio.to_thread(next, iterator, done)
            if item is done:
                return
            assert isinstance(item, SessionEvent)
            yield item

    async def cancel(
        self, sid: str, reason: str = "cancelled by user", *, actor: str | None = None
    ) -> SessionStatus:
        """See :meth:`Client.cancel`."""
        return await asyncio.to_thread(self.sync.cancel, sid, reason, actor=actor)

    async def signal(
        self, sid: str, text: str, *, constraint: bool = True, actor: str | None = None
    ) -> str:
        """See :meth:`Client.signal`."""
        return await asyncio.to_thread(
            self.sync.signal, sid, text, constraint=constraint, actor=actor
        )

    async def approve(
        self,
        sid: str,
        *,
        step: str | None = None,
        action: str | None = None,
        note: str = "",
        actor: str | None = None,
    ) -> str:
        """See :meth:`Client.approve`."""
        return await asyncio.to_thread(
            self.sync.approve, sid, step=step, action=action, note=note, actor=actor
        )

    async def retry_step(
        self, sid: str, step: str, note: str = "", *, actor: str | None = None
    ) -> str:
        """See :meth:`Client.retry_step`."""
        return await asyncio.to_thread(self.sync.retry_step, sid, step, note, actor=actor)

    async def skip_step(
        self, sid: str, step: str, note: str = "", *, actor: str | None = None
    ) -> str:
        """See :meth:`Client.skip_step`."""
        return await asyncio.to_thread(self.sync.skip_step, sid, step, note, actor=actor)

    async def fork(
        self,
        sid: str,
        *,
        version: int | None = None,
        plan: PlanLike | None = None,
        actor: str | None = None,
    ) -> str:
        """See :meth:`Client.fork`."""
        return await asyncio.to_thread(self.sync.fork, sid, version=version, plan=plan, actor=actor)

    async def continue_session(
        self,
        sid: str,
        *,
        max_replans: int | None = None,
        deadline_s: float | None = None,
        max_tokens: int | None = None,
        actor: str | None = None,
    ) -> None:
        """See :meth:`Client.continue_session`."""
        await asyncio.to_thread(
            self.sync.continue_session,
            sid,
            max_replans=max_replans,
            deadline_s=deadline_s,
            max_tokens=max_tokens,
            actor=actor,
        )

    async def close(self) -> None:
        """Close the Redis connections."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
