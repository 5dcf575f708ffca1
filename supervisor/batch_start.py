"""Starting a batch of sessions together: which ones, and sending their first writes.

When a supervisor takes many sessions at once (a burst on the inbox), each session's start
used to be its own task: awaiting the batch's load, then its first fenced write, one lap of
the event loop per await, behind every other session starting or running. The batch does
it instead (supervisor/service.py ``_take``): one round trip reads every session hash,
plan and pending count, each fresh session is begun from that without an await
(``SessionRunner.begin``: its ready steps marked running and their messages built), and
all the first writes leave in one pipeline before any loop runs; each loop then awaits
only its own write's reply.

Only a session that has nothing else to do first is begun that way (:func:`can_begin`);
any other is started by its own loop, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from planloop.core.models import SessionStatus
from planloop.supervisor.session_base import CANCEL_FIELD
from planloop.supervisor.state import Taken
from planloop.supervisor.store_port import WriteOp
from planloop.supervisor.stream_flags import PLANNING_FIELD, STREAMING


def can_begin(taken: Taken) -> bool:
    """Whether the batch can start ``taken`` from what it read, with no round trip of the
    session's own: taken (an epoch), never owned before (no ``started_at``: nothing ran,
    nothing to settle or take over), with its plan read (a goal without one is planned
    by its loop), no cancel asked for (the loop ends it), no events left pending, not
    ended, and not mid-way through a streamed plan."""
    fields = taken.fields
    if not taken.epoch or not fields or taken.plan_version <= 0 or taken.plan_json is None:
        return False
    if fields.get("started_at") or CANCEL_FIELD in fields:
        return False
    if fields.get(PLANNING_FIELD) == STREAMING:
        return False
    status = fields.get("status")
    if status and SessionStatus(status).ended:
        return False
    return taken.pending == 0


Write = Callable[[str, int, Sequence[WriteOp]], Awaitable[None]]


def send_first_writes(
    write: Write, writes: Sequence[tuple[str, int, list[WriteOp]]]
) -> list[asyncio.Future[None]]:
    """Send each ``(sid, epoch, ops)`` as its session's fenced write, all in this loop
    turn (the store's write batch makes them one pipeline); per write, the future of its
    reply (its error retrieved, so a loop that stopped first leaves none unretrieved)."""
    futures: list[asyncio.Future[None]] = []
    for sid, epoch, ops in writes:
        future = asyncio.ensure_future(write(sid, epoch, ops))
        future.add_done_callback(_retrieve)
        futures.append(future)
    return futures


def _retrieve(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()
