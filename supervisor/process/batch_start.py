"""Starting a batch of sessions together: which ones start from what the batch read.

When a supervisor takes many sessions at once (a burst on the inbox), two round trips read
what all of them start from (supervisor/process/service.py ``_take``: the leases with the
session hashes, then every plan and pending count). Their loops are started a chunk at a
time: a fresh session's loop runs from what the batch read to its first dispatch without an
await of its own, so a chunk's first writes are made in one turn of the event loop, and the
store port sends them in one pipeline (``SessionStore.write``: supervisor/io/write_batch.py)
before the next chunk's loops start. Each loop awaits only its own write's reply.

Only a session with nothing else to do first starts that way (:func:`starts_from_batch`);
any other reads what it needs itself, holding a start slot (process/admission.py).
"""

from __future__ import annotations

import asyncio

from planloop.core.models import SessionStatus
from planloop.supervisor.io.redis_store import Taken
from planloop.supervisor.io.stream_flags import PLANNING_FIELD, STREAMING
from planloop.supervisor.session.ports import CANCEL_FIELD


def starts_from_batch(taken: Taken | None) -> bool:
    """Whether ``taken`` starts from what its batch read, with no round trip of its own
    before its first dispatch: taken (an epoch), never owned before (no ``started_at``:
    nothing ran, nothing to settle or take over), with its plan read (a goal without one
    is planned by its loop), no cancel asked for (the loop ends it), no events left
    pending, not ended, and not mid-way through a streamed plan."""
    if taken is None:
        return False
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


def retrieve_error(done: asyncio.Future[None]) -> None:
    """A done callback: the future's error is retrieved, so one nobody awaited (its loop
    stopped first) is not reported as never retrieved; whoever awaits it still raises it."""
    if not done.cancelled():
        done.exception()
