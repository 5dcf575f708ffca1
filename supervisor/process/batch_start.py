"""Starting a batch of sessions together: which ones, and sending their first writes.

When a supervisor takes many sessions at once (a burst on the inbox), each session's start
used to be its own task: awaiting the batch's load, then its first fenced write, one lap of
the event loop per await, behind every other session starting or running. The batch does
it instead (supervisor/process/service.py ``_take``): one round trip reads every session hash,
plan and pending count, the fresh sessions are begun from that a chunk at a time without
an await (``SessionStart.begin``: ready steps marked running, their messages built), and
each chunk's first writes leave in one pipeline before the next chunk is begun; each loop
awaits only its own write's reply.

Only a session that has nothing else to do first is begun that way (:func:`can_begin`);
any other is started by its own loop, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from planloop.core.models import SessionStatus
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.store_port import WriteOp
from planloop.supervisor.io.stream_flags import PLANNING_FIELD, STREAMING
from planloop.supervisor.session.ports import CANCEL_FIELD


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


FirstWrite = tuple[str, int, Sequence[WriteOp]]  # a session begun: (sid, epoch, its first ops)
WriteMany = Callable[[Sequence[FirstWrite]], Awaitable[list[BaseException | None]]]


def first_replies(count: int) -> list[asyncio.Future[None]]:
    """One future per session of a chunk, for its loop to await its first write's reply
    (:func:`send_first_writes` settles them; the error of one whose loop stopped first is
    retrieved here, so none is left unretrieved)."""
    loop = asyncio.get_running_loop()
    replies: list[asyncio.Future[None]] = [loop.create_future() for _ in range(count)]
    for reply in replies:
        reply.add_done_callback(retrieve_error)
    return replies


async def send_first_writes(
    write_many: WriteMany,
    writes: Sequence[FirstWrite],
    replies: Sequence[asyncio.Future[None]],
) -> None:
    """Send each ``(sid, epoch, ops)`` as its session's fenced write, all in one round
    trip, and settle each one's future in ``replies`` with its outcome."""
    try:
        outcomes = await write_many(writes)
    except asyncio.CancelledError:
        for reply in replies:
            reply.cancel()
        raise
    except Exception as exc:  # the round trip failed: every session gets why
        outcomes = [exc] * len(writes)
    for reply, outcome in zip(replies, outcomes, strict=True):
        if reply.done():
            continue
        if outcome is None:
            reply.set_result(None)
        else:
            reply.set_exception(outcome)


def retrieve_error(done: asyncio.Future[None]) -> None:
    """A done callback: the future's error is retrieved, so one nobody awaited (its loop
    stopped first) is not reported as never retrieved; whoever awaits it still raises it."""
    if not done.cancelled():
        done.exception()
