"""Worker pools: which queue a worker consumes, and which queue a step is sent to.

**One queue per distinct tool set.** A worker consumes the *pool queue* of the exact set of
tools it serves, ``<queue>.<toolsets>.<hash>`` (e.g. ``planloop.bench+ecommerce.3f2a9c1d``):
the toolsets (tool-name prefixes) make it readable, the hash of the sorted tool names makes
it exact. Every worker that consumes a pool queue therefore serves every tool any other
consumer of it serves, so a step routed there can never be popped by a worker lacking its
tool. A queue per tool-name prefix (``planloop.acme``) would not give that: two workers
with different ``acme`` modules would share it and take each other's steps. Workers with the
same ``PLANLOOP_TOOL_MODULES`` share one pool queue, wherever they run, and a restarted
worker picks up what its predecessor left queued. Nothing is configured: the name follows
from the tools. The number of pool queues is the number of distinct worker builds, which
keeps the ``queue`` metric label bounded.

A worker does not consume the base queue (``Settings.queue``) unless told to
(``--queues``): a message there could reach any worker.

**Routing** (:func:`route_step`, pure): a step's own ``queue:`` wins, then the
``tool_queues`` setting (both explicit: sent whether or not anyone consumes the queue);
otherwise a queue with at least one live consumer of which *every* live consumer serves the
tool. Several such queues (pools with overlapping tools) share the steps by a hash of the
step's key. None means: wait, no live worker serves it (the supervisor bounds the wait).

:class:`LiveRoutes` is the supervisor's cache of the heartbeats that decision reads.
"""

from __future__ import annotations

import hashlib
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import redis

from planloop.core.heartbeat import Heartbeat, read_heartbeats
from planloop.core.keys import Keys

log = logging.getLogger(__name__)

# Toolset names a pool queue's name spells out; more are counted (the hash stays exact).
NAMED_TOOLSETS = 3
# While Redis does not answer, the heartbeats are tried again this often at most, seconds.
UNREACHABLE_S = 5.0


def pool_queue(base: str, tools: Iterable[str]) -> str:
    """The pool queue of a worker serving exactly ``tools`` on deployment queue ``base``."""
    names = sorted(set(tools))
    toolsets = sorted({name.partition(".")[0] for name in names})
    shown = "+".join(toolsets[:NAMED_TOOLSETS]) or "none"
    if len(toolsets) > NAMED_TOOLSETS:
        shown += f"+{len(toolsets) - NAMED_TOOLSETS}more"
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:8]
    return f"{base}.{shown}.{digest}"


def worker_queues(base: str, tools: Iterable[str], extra: Sequence[str] = ()) -> list[str]:
    """The queues a worker consumes: its pool queue, then ``extra`` (``--queues``), once each."""
    return list(dict.fromkeys([pool_queue(base, tools), *extra]))


@dataclass(frozen=True)
class Pool:
    """A queue some live workers consume, and the tools every one of them serves."""

    queue: str
    tools: frozenset[str]
    workers: tuple[str, ...]


def live_pools(workers: Iterable[Heartbeat], base: str, now: float) -> list[Pool]:
    """The queues live workers of deployment ``base`` consume, with the tools all of their
    consumers serve (the intersection), sorted by queue name."""
    served: dict[str, frozenset[str]] = {}
    names: dict[str, list[str]] = {}
    for hb in workers:
        if hb.queue != base or not hb.live(now):
            continue
        tools = frozenset(hb.tools)
        for queue in hb.consumed():
            served[queue] = served[queue] & tools if queue in served else tools
            names.setdefault(queue, []).append(hb.worker)
    return [Pool(q, served[q], tuple(sorted(names[q]))) for q in sorted(served)]


def route_step(
    needs: Sequence[str],
    *,
    tool: str,
    step_queue: str | None,
    tool_queues: Mapping[str, str],
    pools: Sequence[Pool],
    key: str = "",
) -> str | None:
    """The queue to send a step to, or None: wait, no live worker serves what it needs.

    Args:
        needs: the tools a worker must serve to run the step (its tool; an agent step's
            tools; nothing for a step any worker runs).
        tool: the step's tool (what ``tool_queues`` is keyed by).
        step_queue: the step's own ``queue:``, if any.
        tool_queues: the ``tool_queues`` setting.
        pools: the live pools (:func:`live_pools`).
        key: spreads steps over several pools that all serve them (the step's id).
    """
    if step_queue:
        return step_queue
    explicit = tool_queues.get(tool)
    if explicit:
        return explicit
    wanted = set(needs)
    fit = [p.queue for p in pools if wanted <= p.tools]
    if not fit:
        return None
    return fit[zlib.crc32(key.encode()) % len(fit)] if len(fit) > 1 else fit[0]


class LiveRoutes:
    """The live pools of one deployment, from heartbeats read at most every ``refresh_s``.

    A supervisor routes on its event loop: reads use a client with a short timeout
    (core/catalogue.py ``catalogue_client``) and a Redis that does not answer leaves the
    last pools read in use until the next period.
    """

    def __init__(self, client: redis.Redis, keys: Keys, base: str, refresh_s: float) -> None:
        self.client = client
        self.keys = keys
        self.base = base
        self.refresh_s = refresh_s
        self._pools: list[Pool] = []
        self._read_at = float("-inf")  # monotonic time of the last read
        self._reachable = True

    def fresh(self) -> bool:
        """Whether the pools were read within the refresh period (a longer one while Redis
        does not answer: each try may hold the event loop up for the client's timeout)."""
        period = self.refresh_s if self._reachable else max(self.refresh_s, UNREACHABLE_S)
        return time.monotonic() - self._read_at < period

    def pools(self) -> list[Pool]:
        """The live pools, read again when the last read is older than the refresh period."""
        if not self.fresh():
            self._read_at = time.monotonic()
            try:
                beats = read_heartbeats(self.client, self.keys)
            except redis.RedisError as exc:
                if self._reachable:  # once per outage
                    log.warning("worker heartbeats unreadable (%s); routing by the last", exc)
                self._reachable = False
                return self._pools
            self._reachable = True
            self._pools = live_pools(beats, self.base, time.time())
        return self._pools

    def close(self) -> None:
        self.client.close()


def queue_lengths(
    client: redis.Redis, keys: Keys, base: str, max_queues: int = 64
) -> Callable[[], dict[str, int]]:
    """For ``planloop_queue_depth``: the length of the base queue and of every queue a live
    worker of ``base`` consumes (at most ``max_queues``), read when called."""

    def lengths() -> dict[str, int]:
        pools = live_pools(read_heartbeats(client, keys), base, time.time())
        queues = list(dict.fromkeys([base, *(p.queue for p in pools)]))[:max_queues]
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            pipe.llen(queue)
        return {q: int(n) for q, n in zip(queues, pipe.execute(), strict=True)}

    return lengths
