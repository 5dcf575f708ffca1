"""Worker heartbeats: which workers are alive, on which queues, serving which tools.

Each worker writes its own field of the hash ``pl:workers`` (core/keys.py) every
``worker_heartbeat_s``: its name -> :class:`Heartbeat` as JSON, with ``expires_at`` three
periods ahead (one or two beats may be lost to a Redis fault). A worker that stops deletes its
field; one that dies is left out by readers once its entry has expired, and pruned by the next
beat of any worker. ``submit`` reads this to refuse a plan whose tools no live worker serves;
the supervisor routes each step to a queue a live worker serving its tool consumes
(core/routing.py).
"""

from __future__ import annotations

import logging
import time
from typing import cast

import redis
from pydantic import BaseModel, Field, ValidationError

from planloop.core.keys import Keys

log = logging.getLogger(__name__)

# A heartbeat stays valid this many periods after it was written.
LIVE_PERIODS = 3


class Heartbeat(BaseModel):
    """One worker as it last reported itself."""

    worker: str
    queue: str = Field(description="The deployment's base queue (Settings.queue).")
    queues: list[str] = Field(
        default_factory=list,
        description="The queues it consumes (its pool queue, --queues); empty: ``queue``.",
    )
    tools: list[str] = Field(default_factory=list)
    seen_at: float = Field(description="When it beat, seconds since the epoch.")
    expires_at: float = Field(description="When the beat stops counting, seconds since the epoch.")

    def live(self, now: float) -> bool:
        return now < self.expires_at

    def consumed(self) -> list[str]:
        """The queues it takes steps from (a heartbeat of an older worker names none: its
        base queue)."""
        return self.queues or [self.queue]

    def toolsets(self) -> list[str]:
        """The tool name prefixes it serves (``bench``, ``ecommerce``, ...), sorted."""
        return sorted({name.partition(".")[0] for name in self.tools})


def beat(
    client: redis.Redis,
    keys: Keys,
    *,
    worker: str,
    queue: str,
    tools: list[str],
    period_s: float,
    queues: list[str] | None = None,
) -> Heartbeat:
    """Write ``worker``'s heartbeat, and drop expired ones of other workers, in one round trip."""
    now = time.time()
    entry = Heartbeat(
        worker=worker,
        queue=queue,
        queues=list(queues or []),
        tools=sorted(tools),
        seen_at=now,
        expires_at=now + LIVE_PERIODS * period_s,
    )
    stale = [hb.worker for hb in read_heartbeats(client, keys) if not hb.live(now)]
    pipe = client.pipeline(transaction=False)
    pipe.hset(keys.workers, worker, entry.model_dump_json())
    if stale:
        pipe.hdel(keys.workers, *stale)
    pipe.execute()
    return entry


def forget(client: redis.Redis, keys: Keys, worker: str) -> None:
    """Remove ``worker``'s heartbeat (it is stopping)."""
    client.hdel(keys.workers, worker)


def read_heartbeats(client: redis.Redis, keys: Keys) -> list[Heartbeat]:
    """Every heartbeat stored, live or not (one that does not parse is left out)."""
    beats: list[Heartbeat] = []
    raw = cast(dict[str, str], client.hgetall(keys.workers))
    for name, text in sorted(raw.items()):
        try:
            beats.append(Heartbeat.model_validate_json(text))
        except ValidationError:
            log.warning("worker heartbeat of %r does not parse; ignored", name)
    return beats


def live_workers(
    client: redis.Redis, keys: Keys, queue: str, now: float | None = None
) -> list[Heartbeat]:
    """The workers on ``queue`` whose heartbeat has not expired."""
    at = time.time() if now is None else now
    return [hb for hb in read_heartbeats(client, keys) if hb.queue == queue and hb.live(at)]
