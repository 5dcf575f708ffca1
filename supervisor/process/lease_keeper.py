"""Keeps a supervisor's hold on its session shards alive, from a thread of its own.

A supervisor holds its shards under one token per run (core/shards.py): each shard's key
names the token, and the token's liveness key, renewed here every third of the lease TTL
(1.5 s by default), keeps them all. A renewal is one PEXPIRE, however many shards and
sessions are held.

The renewal must happen within the TTL whatever the session loops are doing. On the event
loop it waited its turn behind every ready session: a supervisor busy with a thousand
sessions fell behind its own renewals and lost sessions it was driving perfectly well. So
the renewals run in a thread and only tell the event loop when the hold is gone: the
liveness key found expired (this process was paused, or Redis lost the key) or Redis silent
for longer than the TTL. Either way every loop is stopped and the token is retired; the
shards come back under a new token through the reclaim path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import redis

from planloop.core.keys import Keys
from planloop.core.lua import AcquireShard
from planloop.core.redis_client import RedisAddress, sync_client
from planloop.core.redis_faults import is_redis_fault
from planloop.core.shards import shard_token

log = logging.getLogger(__name__)

Take = tuple[int, str]  # (shard, the token seen holding it: '' = none)


def renewal_wait(ttl_s: float, round_s: float) -> float:
    """How long to wait before the next renewal round, given how long this one took: rounds
    start a third of the TTL apart, so a slow round (a loaded machine) never pushes the next
    one past the TTL; one that took longer than that starts it at once."""
    return max(0.0, ttl_s / 3 - round_s)


class LeaseKeeper:
    """A daemon thread renewing the hold of the supervisor ``owner`` every third of the TTL.

    Args:
        all_lost: called on the event loop (with the reason) when the hold is gone.
    """

    def __init__(
        self,
        url: str | RedisAddress,
        keys: Keys,
        ttl_s: float,
        *,
        owner: str,
        all_lost: Callable[[str], None],
    ) -> None:
        self.keys, self.ttl_s, self.owner = keys, ttl_s, owner
        self._ttl_ms = int(ttl_s * 1000)
        self._all_lost = all_lost
        # A renewal unanswered within the TTL is as good as failed.
        self._client = sync_client(url, decode_responses=True, socket_timeout=ttl_s)
        self._acquire = AcquireShard.register(self._client)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None  # what ended the thread (not a fault)
        # The token and whether its liveness key was written: shared by the keeper's thread
        # and the worker thread taking shards (reentrant: a take may retire the token).
        self._lock = threading.RLock()
        self._token = self._new_token()
        self._begun = False

    @property
    def token(self) -> str:
        with self._lock:
            return self._token

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="leases", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop renewing and delete the liveness key: every shard still naming this run's
        token is free at once (call it once the loops have stopped)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.ttl_s * 2)
        with self._lock, contextlib.suppress(redis.RedisError, OSError):  # else it expires
            if self._begun:
                self._client.delete(self.keys.holder_alive(self._token))
        self._client.close()

    def take(self, takes: Sequence[Take]) -> tuple[str, list[int]]:
        """Take the shards of ``takes`` under this run's token (called in a worker thread,
        not on the event loop), one round trip for all: the token, and per take the shard's
        new epoch (0: not taken). The first take writes the token's liveness key; a take
        that finds it lapsed takes nothing and retires the token."""
        with self._lock:
            token, begun = self._token, self._begun
            alive_key = self.keys.holder_alive(token)
            pipe = self._client.pipeline(transaction=False)
            if begun:
                pipe.pexpire(alive_key, self._ttl_ms)
            else:
                pipe.set(alive_key, "1", nx=True, px=self._ttl_ms)
            for shard, seen in takes:
                call = AcquireShard(
                    shard_lease_key=self.keys.shard_lease(shard),
                    shard_epoch_key=self.keys.shard_epoch(shard),
                    token=token,
                    seen=seen,
                )
                self._acquire(call, client=pipe)
            alive, *epochs = pipe.execute()
            if not alive:  # what was written names a dead token: free for the next look
                self._retire(token, "the hold lapsed before shards were taken")
                return token, [0] * len(takes)
            self._begun = True
            return token, [int(epoch) for epoch in epochs]

    def _run(self) -> None:
        """Renew, report, and start again a third of the TTL after this round started; until
        stopped or a non-fault error."""
        renewed_at, faulty = time.monotonic(), False
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                with self._lock:
                    token, begun = self._token, self._begun
                if not begun:  # nothing held: nothing to lose
                    renewed_at, faulty = sent, False
                    self._stop.wait(self.ttl_s / 3)
                    continue
                try:
                    alive = self._client.pexpire(self.keys.holder_alive(token), self._ttl_ms)
                except (redis.RedisError, OSError) as exc:
                    if isinstance(exc, redis.RedisError) and not is_redis_fault(exc):
                        raise
                    if not faulty:
                        log.warning("lease renewal failed (%s: %s)", type(exc).__name__, exc)
                    faulty = True
                    if time.monotonic() - renewed_at >= self.ttl_s:
                        self._retire(token, "redis unreachable for longer than the lease TTL")
                else:
                    took = time.monotonic() - sent
                    if took > self.ttl_s / 3:  # the hold is at risk: say why it may go
                        log.warning("renewing the shard hold took %.2fs", took)
                    if sent - renewed_at > self.ttl_s:
                        log.warning("hold renewed %.2fs after the last renewal", sent - renewed_at)
                    renewed_at, faulty = sent, False
                    if not alive:
                        self._retire(
                            token,
                            "the hold on the shards lapsed in Redis (this process paused or "
                            "cut off for longer than the lease TTL, or Redis lost the key)",
                        )
                self._stop.wait(renewal_wait(self.ttl_s, time.monotonic() - sent))
        except BaseException as exc:
            self.error = exc
            log.exception("the lease keeper stopped")

    def _retire(self, token: str, why: str) -> None:
        """The hold under ``token`` is gone: later takes use a new token; the event loop
        stops every session loop (once per token)."""
        with self._lock:
            if self._token != token:
                return
            self._token, self._begun = self._new_token(), False
        log.warning("shard hold %s gone: %s", token, why)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._all_lost, why)

    def _new_token(self) -> str:
        return shard_token(self.owner, uuid.uuid4().hex)
