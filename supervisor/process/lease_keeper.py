"""Renews the leases of every session shard a supervisor owns, from a thread of its own.

A supervisor owns sessions by shard (core/shards.py): it leases whole shards, so one renewal
round costs one script call for its shards, however many sessions they hold.

A lease must be renewed within ``lease_ttl_s`` (1.5 s by default) whatever the session loops
are doing. On the event loop, the renewal waits its turn behind every ready session: a
supervisor busy with a thousand sessions fell behind its own renewals and lost the leases of
sessions it was driving perfectly well. So the renewals run in a thread, one pipeline per
tick for all leases, and only tell the event loop what changed: a lease found lost (the loops
of its sessions are cancelled at once), or Redis silent for longer than the TTL (every loop is
stopped: their leases are taken as lost and come back through the reclaim path).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence

import redis

from planloop.core.keys import Keys
from planloop.core.lua import AcquireShard, RenewLeases
from planloop.core.redis_client import RedisAddress, sync_client
from planloop.core.redis_faults import is_redis_fault

log = logging.getLogger(__name__)

Lease = tuple[str, str]  # (shard number as text, token)
RENEW_BATCH = 500  # leases per script call (a script holds Redis for its whole run)


def renewal_wait(ttl_s: float, round_s: float) -> float:
    """How long to wait before the next renewal round, given how long this one took: rounds
    start a third of the TTL apart, so a slow round (a loaded machine, a thousand leases)
    never pushes the next one past the TTL; one that took longer than that starts it at once."""
    return max(0.0, ttl_s / 3 - round_s)


class LeaseKeeper:
    """A daemon thread renewing ``owned()`` every third of the lease TTL.

    Args:
        owned: the leases to renew now (called from the keeper's thread: it must only read).
        lost: called on the event loop with a lease the renewal found lost.
        all_lost: called on the event loop (with the reason) when Redis stayed silent for
            longer than the TTL.
    """

    def __init__(
        self,
        url: str | RedisAddress,
        keys: Keys,
        ttl_s: float,
        *,
        owned: Callable[[], Sequence[Lease]],
        lost: Callable[[Lease], None],
        all_lost: Callable[[str], None],
    ) -> None:
        self.keys = keys
        self.ttl_s = ttl_s
        self._owned, self._lost, self._all_lost = owned, lost, all_lost
        # A renewal unanswered within the TTL is as good as failed.
        self._client = sync_client(url, decode_responses=True, socket_timeout=ttl_s)
        self._renew = RenewLeases.register(self._client)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None  # what ended the thread (not a fault)
        self._seen: dict[Lease, float] = {}
        self._acquire = AcquireShard.register(self._client)
        # Leases taken by :meth:`take` that the event loop has not registered yet: renewed
        # here from the moment they are taken (a busy loop may need longer than the TTL to
        # get round to the reply), until :meth:`settle`.
        self._fresh: set[Lease] = set()
        self._fresh_lock = threading.Lock()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="leases", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.ttl_s * 2)
        self._client.close()

    def take(self, takes: Sequence[Lease], ttl_s: float) -> list[int]:
        """Take the shard leases of ``takes`` (called in a worker thread, not on the event
        loop): one round trip for all. Per take, the shard's new epoch (0: held elsewhere).
        The taken leases are renewed from now on, until the owner registers them (``owned``)
        and calls :meth:`settle`.
        """
        pipe = self._client.pipeline(transaction=False)
        for shard, token in takes:
            call = AcquireShard(
                shard_lease_key=self.keys.shard_lease(int(shard)),
                shard_epoch_key=self.keys.shard_epoch(int(shard)),
                token=token,
                ttl_ms=int(ttl_s * 1000),
            )
            self._acquire(call, client=pipe)
        epochs = [int(epoch) for epoch in pipe.execute()]
        with self._fresh_lock:
            self._fresh.update(lease for lease, epoch in zip(takes, epochs, strict=True) if epoch)
        return epochs

    def settle(self, leases: Sequence[Lease]) -> None:
        """The owner registered ``leases`` (or gave them up): renewed through ``owned``."""
        with self._fresh_lock:
            self._fresh.difference_update(leases)

    def _to_renew(self) -> list[Lease]:
        owned = list(self._owned())
        with self._fresh_lock:
            fresh = self._fresh - set(owned)
        return owned + sorted(fresh)

    def _run(self) -> None:
        """Renew, report, and start again a third of the TTL after this round started; until
        stopped or a non-fault error."""
        renewed_at, faulty = time.monotonic(), False
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                leases = self._to_renew()
                try:
                    results = self._renew_all(leases)
                except (redis.RedisError, OSError) as exc:
                    if isinstance(exc, redis.RedisError) and not is_redis_fault(exc):
                        raise
                    if not faulty:
                        log.warning("lease renewal failed (%s: %s)", type(exc).__name__, exc)
                    faulty = True
                    if time.monotonic() - renewed_at >= self.ttl_s:
                        self._tell(
                            self._all_lost, "redis unreachable for longer than the lease TTL"
                        )
                else:
                    took = time.monotonic() - sent
                    if took > self.ttl_s / 3:  # the leases are at risk: say why they may go
                        log.warning("renewing %d leases took %.2fs", len(leases), took)
                    if sent - renewed_at > self.ttl_s:
                        log.warning(
                            "leases renewed %.2fs after the last renewal", sent - renewed_at
                        )
                    renewed_at, faulty = sent, False
                    lost = [lease for lease, ok in zip(leases, results, strict=True) if not ok]
                    if lost:  # not those released meanwhile (a shard given back)
                        lost = [lease for lease in lost if lease in set(self._to_renew())]
                    if lost:
                        self._explain(lost, len(leases))
                    # when each lease was first renewed (named when one is lost)
                    self._seen = {lease: self._seen.get(lease, sent) for lease in leases}
                    for lease in lost:
                        self._tell(self._lost, lease)
                self._stop.wait(renewal_wait(self.ttl_s, time.monotonic() - sent))
        except BaseException as exc:
            self.error = exc
            log.exception("the lease keeper stopped")

    def _renew_all(self, leases: list[Lease]) -> list[bool]:
        """Renew ``leases``: one script call per ``RENEW_BATCH``, all in one pipeline."""
        if not leases:
            return []
        pipe = self._client.pipeline(transaction=False)
        ttl_ms = int(self.ttl_s * 1000)
        for start in range(0, len(leases), RENEW_BATCH):
            batch = leases[start : start + RENEW_BATCH]
            call = RenewLeases(
                ttl_ms=ttl_ms,
                tokens=json.dumps([token for _, token in batch]),
                lease_keys=[self.keys.shard_lease(int(shard)) for shard, _ in batch],
            )
            self._renew(call, client=pipe)
        return [bool(ok) for held in pipe.execute() for ok in held]

    def _explain(self, lost: list[Lease], n: int) -> None:
        """Say, for a few lost leases per round, who holds each now and since when it was
        ours: a lease never renewed before it was found lost was taken too late to keep."""
        now = time.monotonic()
        for shard, token in lost[:3]:
            key = self.keys.shard_lease(int(shard))
            first = self._seen.get((shard, token))
            holder: object = "?"
            left: object = "?"
            with contextlib.suppress(redis.RedisError, OSError):  # never the keeper's end
                holder, left = self._client.get(key), self._client.pttl(key)
            log.warning(
                "shard=%s lease gone at renewal (%d leases this round): held by %r, %s ms "
                "left; renewed by us since %s",
                shard,
                n,
                holder,
                left,
                "never" if first is None else f"{now - first:.2f}s",
            )

    def _tell(self, callback: Callable[[object], None] | Callable[..., None], arg: object) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, arg)
