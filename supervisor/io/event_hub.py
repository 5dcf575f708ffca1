"""One XREADGROUP for the event streams of every session held here, fanned out to each.

A session loop waits for its events between turns. Reading them with one blocking
XREADGROUP per session held one Redis connection per waiting session and cost one command
(and one wake-up) per session per turn: a supervisor holding a thousand sessions spent its
time sending them. While any session waits, the hub reads the streams of all sessions held
here in one XREADGROUP (same consumer group and consumer name as before, so pending entries,
takeover and XAUTOCLAIM work unchanged) and puts what it gets in each session's mailbox.

The read names the sessions in a turn too, not only those waiting: a session that finishes
its turn and waits again finds its stream in the read in flight, or its entries already in
its mailbox. Naming only the waiting ones made every turn's end unblock the read and send it
again (a lap of the loop and a read of every stream, per session per turn). A mailbox that
holds ``count`` entries is left out until its session takes them, so a busy session's
events wait in Redis, not in memory.

The read blocks on its own connection. A session that starts waiting while the hub is
blocked on a read that does not include its stream (its first wait, or a full mailbox)
unblocks it (``CLIENT UNBLOCK``, as if the read timed out), and the hub reads again with the
new set of streams.

A session with nothing due parks: it waits on its mailbox without a time. One that must
look again at a time (a back-off ending, its deadline) gets a timer in the hub's one timer
heap (io/wake_timers.py), never a wait of its own. A slow sweep (every ``SWEEP_S``, one
pipelined XPENDING summary and HGET of the cancel field per held session) wakes a parked
session whose stream has entries pending with another consumer (a former owner read them
after we took the session over: :meth:`claim_due` says so once) or whose cancel field was
set without its event (a producer that writes only the field).

Entries reach a mailbox only while their session is held here; one that arrives after its
session left stays pending under this consumer, and whoever takes the session next claims it
(XAUTOCLAIM). An entry that waited in a mailbox longer than ``STALE_S`` has its delivery
time reset (XCLAIM to ourselves) before it is handed over, so the periodic claim of idle
entries never takes it a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.redis_client import RedisAddress, async_client
from planloop.core.redis_faults import is_missing_group
from planloop.supervisor.io.wake_timers import WakeTimers

log = logging.getLogger(__name__)

Entry = tuple[str, dict[str, str]]
READ_BLOCK_MAX_MS = 5_000  # the hub's own read; sessions wait as long as they ask to
FAULT_PAUSE_S = 0.05  # after a failed read, so a fault does not spin the hub
STALE_S = 1.0  # a mailbox entry older than this gets its delivery time reset
SWEEP_S = 60.0  # held sessions' pending entries and cancel field, looked at this often
SWEEP_BATCH = 1_000  # sessions per pipeline of the sweep
CANCEL_FIELD = "cancel_requested"  # the session hash field a cancel sets (session/ports.py)
_NOGROUP_KEY = re.compile(r"No such key '([^']+)'")


def read_block_ms(socket_timeout: float | None) -> int:
    """How long the hub's read blocks: long, since each read names the stream of every
    held session (10,000 parked sessions: 10,000 keys sent, parsed and blocked on per
    read), and a read is re-sent early whenever an entry arrives or a session not in it
    starts waiting; but well inside a socket timeout the Redis URL sets, which would fail a read
    that blocks as long as it was asked to."""
    if not socket_timeout:
        return READ_BLOCK_MAX_MS
    return max(50, min(READ_BLOCK_MAX_MS, int(socket_timeout * 500)))


def socket_timeout(client: aioredis.Redis) -> float | None:
    """The socket timeout ``client``'s connections read with (the URL's, else redis-py's
    default); when it cannot be told, one that makes the read block a second, as it used to."""
    pool = client.connection_pool
    try:
        return float(pool.connection_class(**pool.connection_kwargs).socket_timeout or 0) or None
    except Exception:  # a connection class that needs more to be built: the safe reading
        return 2.0


@dataclass
class Mailbox:
    """What the hub read for one session and the session has not taken yet."""

    entries: deque[tuple[float, Entry]] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None


class EventHub:
    """The supervisor's reader of session event streams (one per process)."""

    def __init__(
        self,
        url: str | RedisAddress,
        store_client: aioredis.Redis,
        keys: Keys,
        consumer: str,
        count: int,
        *,
        cancel_field: str = CANCEL_FIELD,
        sweep_s: float = SWEEP_S,
    ) -> None:
        self.keys = keys
        self.cancel_field = cancel_field
        self.sweep_s = sweep_s
        self.consumer = consumer
        self.count = count  # entries per stream and read
        self._r = store_client  # for the occasional XCLAIM and CLIENT UNBLOCK
        self._reader = async_client(url, decode_responses=True, single_connection_client=True)
        self._block_ms = read_block_ms(socket_timeout(self._reader))
        self._boxes: dict[str, Mailbox] = {}
        self._waiting: set[str] = set()
        self._reading: set[str] = set()  # the streams of the read in flight
        self._reader_id: int | None = None
        self._unblocking = False
        self._changed = asyncio.Event()
        self._read_done = asyncio.Event()  # set between reads
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._claims: set[str] = set()  # sessions the sweep found a former owner's entries for
        self.timers = WakeTimers()
        self._wait_ids = itertools.count()  # each timed wait's own timer key
        self._side_tasks: set[asyncio.Task[Any]] = set()

    async def read(self, sid: str, *, count: int, block_ms: int | None) -> list[Entry]:
        """Up to ``count`` new events of ``sid``, waiting up to ``block_ms`` for the first
        (None: parked until one arrives or the sweep wakes it; the reply may be empty)."""
        box = self._boxes.get(sid)
        if box is None:
            box = self._boxes[sid] = Mailbox()
        if not box.entries and box.error is None:
            # However short, the wait is on the hub's timer, never a blocked read of its own:
            # Redis times those out with its cron, up to 100 ms late on a quiet server.
            await self._wait(sid, box, None if block_ms is None else block_ms / 1000)
        if box.error is not None:
            error, box.error = box.error, None
            raise error
        return await self._take(sid, box, count)

    def leave(self, sid: str) -> None:
        """The session's loop ended here: what was read for it stays pending in Redis."""
        self._boxes.pop(sid, None)
        self._waiting.discard(sid)
        self._claims.discard(sid)

    def claim_due(self, sid: str) -> bool:
        """True once after the sweep found entries of ``sid`` pending with another consumer."""
        if sid not in self._claims:
            return False
        self._claims.discard(sid)
        return True

    async def close(self) -> None:
        self.timers.close()
        tasks = [t for t in [self._task, self._sweeper, *self._side_tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._reader.aclose()

    # --- the session's side ---------------------------------------------------------------
    async def _wait(self, sid: str, box: Mailbox, timeout_s: float | None) -> None:
        box.arrived.clear()
        self._waiting.add(sid)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="event-hub")
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="event-hub-sweep")
        if self._reading and sid not in self._reading:
            self._unblock()
        # The heap's timer wakes it, as an event would; keyed by this wait (not the session),
        # so two waits of one session never cancel each other's timer.
        timer = f"{sid}#{next(self._wait_ids)}"
        if timeout_s is not None:
            self.timers.wake_in(timer, timeout_s, box.arrived.set)
        try:
            await box.arrived.wait()
        finally:
            self._waiting.discard(sid)
            self.timers.cancel(timer)

    async def _take(self, sid: str, box: Mailbox, count: int) -> list[Entry]:
        taken: list[Entry] = []
        oldest = time.monotonic()
        while box.entries and len(taken) < count:
            arrived, entry = box.entries.popleft()
            oldest = min(oldest, arrived)
            taken.append(entry)
        if taken and time.monotonic() - oldest > STALE_S:
            # Delivered a while ago: reset the delivery time, or the claim of idle entries
            # would hand these to us a second time before they are acknowledged.
            await self._r.xclaim(
                self.keys.events(sid),
                EVENTS_GROUP,
                self.consumer,
                min_idle_time=0,
                message_ids=[e for e, _ in taken],
                justid=True,
            )
        return taken

    def _unblock(self) -> None:
        """Make the hub's blocked read return, so it reads again with the new streams."""
        if self._unblocking or self._reader_id is None:
            return
        self._unblocking = True
        task: asyncio.Task[Any] = asyncio.create_task(self._send_unblock(self._reader_id))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _send_unblock(self, reader_id: int) -> None:
        with contextlib.suppress(aioredis.RedisError):  # the read times out by itself
            await self._r.client_unblock(reader_id)

    # --- the hub's side -------------------------------------------------------------------
    async def _run(self) -> None:
        """Read for the held sessions, fan out, again; sleep while nobody waits."""
        task = asyncio.current_task()
        while True:
            # redis-py can swallow a cancel that lands as a reply arrives: a hub being
            # closed must stop here, not wait on for sessions that will never come.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
            if not self._waiting:
                self._changed.clear()
                await self._changed.wait()
                continue
            reading = self._to_read()
            try:
                reply = await self._read(reading)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._reader_id = None  # a reconnect gets a new id
                self._fail(reading, exc)
                await asyncio.sleep(FAULT_PAUSE_S)
                continue
            now = time.monotonic()
            streams = {self.keys.events(sid): sid for sid in reading}
            for stream, entries in reply or []:
                box = self._boxes.get(streams.get(stream, ""))
                if box is None or not entries:
                    continue  # its session left: the entries stay pending for the next owner
                box.entries.extend((now, entry) for entry in entries)
                box.arrived.set()

    def _to_read(self) -> list[str]:
        """The sessions the next read names: every one held here whose mailbox has room
        (the waiting ones' are empty) and no error its session has not taken yet (a stream
        whose group is missing would fail every read until its loop sees why)."""
        return sorted(
            sid
            for sid, box in self._boxes.items()
            if box.error is None and len(box.entries) < self.count
        )

    async def _read(self, reading: list[str]) -> Any:
        if self._reader_id is None:
            self._reader_id = int(await self._reader.client_id())
        self._reading = set(reading)
        self._read_done.clear()
        self._unblocking = False
        try:
            return await self._reader.xreadgroup(
                EVENTS_GROUP,
                self.consumer,
                {self.keys.events(sid): ">" for sid in reading},
                count=self.count,
                block=self._block_ms,
            )
        finally:
            self._reading = set()
            self._read_done.set()

    # --- the sweep ---------------------------------------------------------------------------
    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a fault: the next sweep looks again
                log.warning("event hub sweep failed (%s: %s)", type(exc).__name__, exc)

    async def sweep(self) -> list[str]:
        """Wake each held session whose stream has entries pending with another consumer
        (noted for :meth:`claim_due`) or whose cancel field is set; the sessions woken."""
        woken: list[str] = []
        sids = list(self._boxes)
        for start in range(0, len(sids), SWEEP_BATCH):
            batch = sids[start : start + SWEEP_BATCH]
            pipe = self._r.pipeline(transaction=False)
            for sid in batch:
                pipe.xpending(self.keys.events(sid), EVENTS_GROUP)
                pipe.hget(self.keys.session(sid), self.cancel_field)
            replies = await pipe.execute(raise_on_error=False)
            for i, sid in enumerate(batch):
                pending, cancel = replies[2 * i], replies[2 * i + 1]
                claim = self._held_elsewhere(pending)
                if claim:
                    self._claims.add(sid)
                box = self._boxes.get(sid)
                if box is not None and (claim or isinstance(cancel, str)):
                    box.arrived.set()
                    woken.append(sid)
        return woken

    def _held_elsewhere(self, pending: Any) -> bool:
        """An XPENDING summary naming a consumer other than ours with entries."""
        if not isinstance(pending, dict) or not pending.get("pending"):
            return False
        return any(
            c.get("name") != self.consumer and int(c.get("pending", 0))
            for c in pending.get("consumers") or []
        )

    def _fail(self, reading: list[str], exc: Exception) -> None:
        """Hand a failed read to the sessions that wait for it (their loops decide what it
        means); one in a turn reads again with its next wait.

        A missing group names its stream: only that session gets the error (waiting or not),
        and the others are read again at once.
        """
        culprits = waiting = [sid for sid in reading if sid in self._waiting]
        match = _NOGROUP_KEY.search(str(exc)) if is_missing_group(exc) else None
        if match is not None:
            named = [sid for sid in reading if self.keys.events(sid) == match.group(1)]
            culprits = named or waiting
        for sid in culprits:
            box = self._boxes.get(sid)
            if box is not None:
                box.error = exc
                box.arrived.set()
