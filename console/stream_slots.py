"""How many live streams the console holds open: per user and in all.

Each open session page holds one server-sent-events stream for as long as it is open; the
caps keep one user (or a script looping on ``/stream``) from taking every connection and
thread the console has. A stream's slot is taken before its response starts and given back
when the response ends, however it ends (the session ended, the tab closed, an error).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections import Counter
from collections.abc import AsyncGenerator, Callable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from planloop.core import metrics

USER_KEY = "planloop.user"  # set by the console's authentication (shared convention)
ANONYMOUS = "-"


def user_of(scope: Scope) -> str:
    """The authenticated user's name: the auth middleware's, else the basic-auth user name."""
    named = scope.get(USER_KEY)
    if isinstance(named, str) and named:
        return named
    header = Headers(scope=scope).get("authorization", "")
    if header.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return ANONYMOUS
        return decoded.partition(":")[0] or ANONYMOUS
    return ANONYMOUS


class StreamSlots:
    """The open streams, counted per user against ``per_user`` and in all against ``total``."""

    def __init__(self, per_user: int, total: int) -> None:
        self.per_user = per_user
        self.total = total
        self.open: Counter[str] = Counter()

    def refusal(self, user: str) -> str | None:
        """Why ``user`` may not open one more stream now, or None."""
        if self.open[user] >= self.per_user:
            return (
                f"too many live streams: user {user!r} has {self.open[user]} open, the most "
                "one user may (PLANLOOP_CONSOLE_STREAMS_PER_USER); close a session tab or "
                "reload it later"
            )
        if sum(self.open.values()) >= self.total:
            return (
                f"too many live streams: the console holds {self.total} open, its limit "
                "(PLANLOOP_CONSOLE_STREAMS_TOTAL); reload the page later"
            )
        return None

    def take(self, user: str) -> None:
        self.open[user] += 1
        metrics.CONSOLE_STREAMS.inc()

    def give_back(self, user: str) -> None:
        self.open[user] -= 1
        if self.open[user] <= 0:
            del self.open[user]
        metrics.CONSOLE_STREAMS.dec()

    def response(self, scope: Scope, body: Callable[[], AsyncGenerator[str, None]]) -> Response:
        """The stream of ``body()`` in a slot of the request's user, or a 429 saying why."""
        user = user_of(scope)
        refused = self.refusal(user)
        if refused is not None:
            metrics.CONSOLE_REFUSED.labels("stream_cap").inc()
            return JSONResponse({"error": refused}, status_code=429, headers={"Retry-After": "30"})
        self.take(user)
        return SlotStream(body(), lambda: self.give_back(user))


class SlotStream(StreamingResponse):
    """A text/event-stream response that gives its slot back when it ends."""

    def __init__(self, body: AsyncGenerator[str, None], release: Callable[[], None]) -> None:
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self.events = body
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()
            # a closed tab cancels the response mid-iteration: close the body now, so its
            # viewer leaves the feed now rather than when the generator is collected
            with contextlib.suppress(Exception):
                await self.events.aclose()
