"""One Redis reader per followed session, shared by every viewer of it.

A :class:`Feed` polls its session once per period (a :class:`console.live.Follower` in a
thread) and hands the messages to each viewer's backlog; a viewer that joins later is first
sent what the feed has seen so far (:class:`Seen`), so it starts where a reader of its own
would have. The feed stops when its last viewer leaves or its session ends. A viewer too slow
to keep up is dropped (its page's EventSource reconnects and starts afresh), so one stalled
tab never holds messages for the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from planloop.console.live import Follower, Message, encode
from planloop.core import metrics
from planloop.producer.client import Producer

log = logging.getLogger(__name__)

POLL_S = 0.3
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
MAX_BACKLOG = 512  # messages a viewer may lag behind before it is dropped


@dataclass
class Seen:
    """What a feed has sent so far, folded: what a newly joined viewer is sent first."""

    plan: dict[str, Any] | None = None
    steps: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    session: dict[str, Any] | None = None
    end: dict[str, Any] | None = None

    def add(self, name: str, data: dict[str, Any]) -> None:
        if name == "steps":
            self.steps.update(data)
        elif name == "events":
            self.events.extend(data["events"])
        elif name in ("plan", "session", "end"):
            setattr(self, name, data)

    def replay(self) -> list[Message]:
        messages: list[Message] = []
        if self.plan is not None:
            messages.append(("plan", self.plan))
        if self.steps:
            messages.append(("steps", dict(self.steps)))
        if self.events:
            messages.append(("events", {"events": list(self.events)}))
        if self.session is not None:
            messages.append(("session", self.session))
        if self.end is not None:
            messages.append(("end", self.end))
        return messages


@dataclass(eq=False)
class Viewer:
    """One open stream: the messages not yet written to it."""

    backlog: list[Message] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: bool = False

    def give(self, messages: list[Message]) -> None:
        if len(self.backlog) + len(messages) > MAX_BACKLOG:
            self.dropped = True
            self.backlog.clear()
        else:
            self.backlog.extend(messages)
        self.wake.set()

    def take(self) -> list[Message]:
        taken, self.backlog = self.backlog, []
        self.wake.clear()
        return taken


class Feed:
    """The one reader of session ``sid`` and the viewers it serves."""

    def __init__(self, producer: Producer, sid: str, poll_s: float) -> None:
        self.producer = producer
        self.follower = Follower(sid)
        self.poll_s = poll_s
        self.seen = Seen()
        self.viewers: set[Viewer] = set()
        self.task: asyncio.Task[None] | None = None

    @property
    def ended(self) -> bool:
        return self.seen.end is not None

    def join(self) -> Viewer:
        viewer = Viewer()
        viewer.give(self.seen.replay())
        self.viewers.add(viewer)
        return viewer

    async def run(self) -> None:
        metrics.CONSOLE_STREAM_READERS.inc()
        try:
            while not self.ended and self.viewers:
                messages = await anyio.to_thread.run_sync(self.follower.poll, self.producer)
                for name, data in messages:
                    self.seen.add(name, data)
                if messages:
                    for viewer in self.viewers:
                        viewer.give(messages)
                if not self.ended:
                    await anyio.sleep(self.poll_s)
        except Exception as exc:  # Redis away, say: each page's EventSource reconnects
            log.warning("live stream of session %s stopped: %s", self.follower.sid, exc)
            for viewer in self.viewers:
                viewer.dropped = True
                viewer.wake.set()
        finally:
            metrics.CONSOLE_STREAM_READERS.dec()


class LiveHub:
    """The feeds of one console process, keyed by session id."""

    def __init__(self, producer: Producer, poll_s: float = POLL_S) -> None:
        self.producer = producer
        self.poll_s = poll_s
        self.feeds: dict[str, Feed] = {}

    @property
    def readers(self) -> int:
        return sum(1 for f in self.feeds.values() if f.task is not None and not f.task.done())

    def _feed(self, sid: str) -> Feed:
        feed = self.feeds.get(sid)
        if feed is None or feed.ended or (feed.task is not None and feed.task.done()):
            feed = self.feeds[sid] = Feed(self.producer, sid, self.poll_s)
        return feed

    async def follow(self, sid: str) -> AsyncGenerator[str, None]:
        """The SSE body for one viewer: what changes in ``sid`` until it has ended."""
        feed = self._feed(sid)
        viewer = feed.join()
        if feed.task is None:
            feed.task = asyncio.get_running_loop().create_task(feed.run())
        try:
            async for text in _written(viewer):
                yield text
        finally:
            feed.viewers.discard(viewer)
            if not feed.viewers:
                self._stop(feed)

    def _stop(self, feed: Feed) -> None:
        # no await: this runs while a viewer's request may be being cancelled
        if self.feeds.get(feed.follower.sid) is feed:
            del self.feeds[feed.follower.sid]
        if feed.task is not None and not feed.task.done():
            feed.task.cancel()


async def _written(viewer: Viewer) -> AsyncIterator[str]:
    while True:
        with anyio.move_on_after(KEEPALIVE_S) as waited:
            await viewer.wake.wait()
        if waited.cancelled_caught:
            yield ": keep-alive\n\n"
            continue
        if viewer.dropped:
            return
        for name, data in viewer.take():
            yield encode(name, data)
            if name == "end":
                return
