"""The supervisor process: owns session shards through leases, one loop per session."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import redis

from planloop.config.settings import Settings
from planloop.core.catalogue import catalogue_client
from planloop.core.key_layout import upgrade_key_layout
from planloop.core.keys import Keys
from planloop.core.live_tools import LiveTools
from planloop.core.logs import bind
from planloop.core.record import SqlRecord
from planloop.core.redis_client import redis_address
from planloop.core.redis_faults import Outage, is_missing_group, is_redis_fault, redact_url
from planloop.core.redis_version import require_supported_redis
from planloop.core.tools import load_tools
from planloop.planner.openai_chat import build_chat_model
from planloop.supervisor.io.rebuild import rebuild_lost_sessions, sessions_to_check
from planloop.supervisor.io.redis_store import SessionStore, Taken
from planloop.supervisor.io.step_queue import Dispatcher
from planloop.supervisor.process.batch_start import retrieve_error
from planloop.supervisor.process.compose import compose
from planloop.supervisor.process.crashes import settle_crash
from planloop.supervisor.process.intake import Intake
from planloop.supervisor.process.lease_keeper import LeaseKeeper
from planloop.supervisor.process.shard_owner import ShardOwner
from planloop.supervisor.session.lessons import build_lesson_memory
from planloop.supervisor.session.loop import SessionRunner

log = logging.getLogger(__name__)

REBUILD_INTERVAL_S = 2.0
OUTAGE_BACKOFF_MAX_S = 2.0  # Redis is tried at least this often while it is unreachable
INBOX_BATCH = 200  # sessions taken per turn at most (two round trips for all of them)
BEGIN_CHUNK = 50  # loops started before their first writes leave (a few tens of ms)
BURST_READ_MS = 5  # during a burst: a read that waits longer than this found its end
HEARTBEAT_INTERVAL_S = 2.0  # how often a serving supervisor says so (`planloop health`)
SWEEP_INTERVAL_S = 2.0  # active sessions of the shards held, looked at for any not running
SWEEP_SLICE = 1_000  # active sessions a sweep looks at (about: SSCAN's COUNT)


@dataclass
class Owned:
    """A session of a shard this process holds, and the task driving it."""

    token: str  # the session's own hold, should its loop crash and cool off
    epoch: int
    task: asyncio.Task[None]
    shard: int


class Supervisor:
    """Owns session shards through leases; any number of supervisors may run side by side."""

    def __init__(self, settings: Settings, name: str | None = None) -> None:
        self.settings = settings
        self.name = name or f"sup-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # The planner's prompt lists what live workers serve (core/live_tools.py), read on the
        # event loop with a short socket timeout; the tools imported here are the fallback.
        tools = LiveTools.from_redis(
            load_tools(settings.tool_modules),
            catalogue_client(redis_address(settings)),
            Keys(settings.key_prefix),
            max_age_s=settings.worker_heartbeat_s,
            on_local=lambda note: log.info("supervisor: %s", note),
        )
        self._tools = tools
        record = SqlRecord.from_url(settings.database_url, auto_migrate=settings.db_auto_migrate)
        chat = build_chat_model(settings) if settings.llm_base_url else None
        # The process keeps its Redis store (leases, inbox, rebuild); the loops get the port.
        self.store = SessionStore.from_url(redis_address(settings), Keys(settings.key_prefix))
        self.ctx = compose(
            settings,
            store=self.store,
            record=record,
            dispatcher=Dispatcher(settings, tools),
            tools=tools,
            name=self.name,
            chat=chat,
            lessons=build_lesson_memory(settings, chat, record.engine),
        )
        self.owned: dict[str, Owned] = {}
        self._finished: list[str] = []  # loops ended since the last look (no scan of all)
        self._per_shard: Counter[int] = Counter()  # loops running per shard, kept as they go
        self.shards = ShardOwner(self.store.r, self.store.keys, self.name, settings)
        self.intake = Intake(self.store.r, self.store.keys, self.name, settings.session_shards)
        self._next_sweep = 0.0
        self._sweep_at = 0  # the active set's scan cursor (0: a new pass)
        self._next_rebuild = 0.0
        self._rebuild_round = 0
        self._next_reclaim = 0.0
        self._rebuilding: asyncio.Task[list[str]] | None = None
        self.outage = Outage(settings.redis_url, log, max_s=OUTAGE_BACKOFF_MAX_S)
        self._inbox_ready = False
        self._keeper: LeaseKeeper | None = None
        self._next_heartbeat = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set.

        0. Wait for Redis to answer (a supervisor started during an outage waits it out)
           and refuse a Redis older than 6.2.
        1. Keep the hold on the shards alive (a thread of its own, so a busy event loop
           never delays a renewal: supervisor/process/lease_keeper.py; a hold found lapsed
           stops every session loop at once, and so does Redis staying out of reach for
           longer than the lease TTL: the shards are taken as lost). A shard a look finds
           held by another stops its own sessions' loops.
        2. Until told to stop: make sure the inbox consumer groups exist (again after Redis
           lost its data); every reclaim interval take free shards up to a fair share (and
           any left free for a TTL), give back what a new peer needs, and adopt the active
           sessions of shards just taken; start sessions announced on the inbox whose shard
           is held here, forward the others to their shard's owner (process/intake.py).
        3. A Redis fault in step 2 is waited out with a back-off and logged once per
           outage; shards whose leases were lost come back through step 2.
           Any other error, or the lease keeper dying, ends the process (exit code 1).
        4. On stop: cancel the session loops, release the shards and end the hold, so a
           peer resumes them without waiting for the hold to expire.
        """
        log.info(
            "supervisor %s starting (redis at %s)", self.name, redact_url(self.settings.redis_url)
        )
        if not await self._until_redis_answers(stop):
            await self.store.r.aclose()
            return
        keeper = LeaseKeeper(
            redis_address(self.settings),
            self.store.keys,
            self.settings.lease_ttl_s,
            owner=self.name,
            all_lost=self._stop_loops,
        )
        keeper.start()
        self._keeper = keeper
        log.info("supervisor %s serving (prefix=%s)", self.name, self.settings.key_prefix)
        try:
            while not stop.is_set():
                if not keeper.alive():  # it never ends by itself: raise why it did
                    raise keeper.error or RuntimeError("the lease keeper stopped")
                try:
                    await self._serve_once()
                except redis.RedisError as exc:
                    if is_missing_group(exc) and self._inbox_ready:
                        log.warning("inbox group gone (redis lost its data): creating it again")
                        self._inbox_ready = False
                        continue
                    await self._wait_out(exc, stop)
                else:
                    self.outage.over()
        finally:
            if self._rebuilding is not None:
                self._rebuilding.cancel()
            await self._let_go()  # the hold is renewed until the loops have stopped
            await asyncio.to_thread(keeper.stop)
            await self.ctx.checkpoints.close()
            if self.ctx.events is not None:
                await self.ctx.events.close()
            self.ctx.dispatcher.close()
            self._tools.close()
            await self.store.r.aclose()

    async def _wait_out(self, exc: redis.RedisError, stop: asyncio.Event) -> None:
        """Back off from a Redis fault (logged once per outage); re-raise any other error."""
        if not is_redis_fault(exc):
            raise exc
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), self.outage.failed(exc))

    async def _until_redis_answers(self, stop: asyncio.Event) -> bool:
        """Check the Redis version and bring its keys to the current layout (renamed once
        after an upgrade: core/key_layout.py), waiting out an unreachable Redis (a
        supervisor started, or restarted, while Redis is down waits for it instead of
        dying). False: stopped."""
        while not stop.is_set():
            try:
                await require_supported_redis(self.store.r, self.settings.redis_url)
                await upgrade_key_layout(self.store.r, self.store.keys)
            except redis.RedisError as exc:
                await self._wait_out(exc, stop)
            else:
                self.outage.over()
                return True
        return False

    async def _serve_once(self) -> None:
        """One turn: (re)create the inbox group if needed, reclaim, take what was announced.

        While the inbox holds a backlog (a burst of submits), the turns read it at once and
        in order, without the reclaim's look at every active session in between (which
        would take the same sessions by session id: in submit order to the second only).
        See admission.py."""
        if not self._inbox_ready:
            await self.intake.ensure()
            self._inbox_ready = True
        admission = self.ctx.admission
        await self._reclaim(admission.in_burst)
        await self._heartbeat()
        block_ms = (
            BURST_READ_MS if admission.in_burst else int(self.settings.reclaim_interval_s * 1000)
        )
        entries = await self.intake.read(block_ms, INBOX_BATCH)
        admission.intake(len(entries), time.monotonic())
        await self.intake.forward(entries, self.shards.owns)
        await self._take([e.sid for e in entries if self.shards.owns(e.sid)])
        await self.intake.ack(entries)

    async def _heartbeat(self) -> None:
        """Say when this supervisor last served (a healthcheck reads it), every few seconds."""
        now = time.monotonic()
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + HEARTBEAT_INTERVAL_S
        await self.store.r.zadd(self.store.keys.supervisors, {self.name: time.time()})

    async def _reclaim(self, in_burst: bool) -> None:
        """Move shards (process/shard_plan.py), then adopt the active sessions of the shards
        held that no loop runs: right after shards were taken, else every sweep interval (a
        cool-off or an old release's lease ran out). Once per reclaim interval: a burst on
        the inbox is read turn after turn, without a look at every active session between."""
        self._forget_finished()
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + self.settings.reclaim_interval_s
        taken_shards = await self._move_shards()  # also in a burst: a new peer gets its share
        if in_burst and not taken_shards:
            return
        rebuilding = self._rebuilding
        if rebuilding is not None and rebuilding.done():
            self._rebuilding = None
            rebuilding.result()  # its failure is handled as if it had happened here
        if now >= self._next_rebuild and self._rebuilding is None:
            # Rare and comparatively costly (a SQL query): Redis lost its data. In the
            # background: the SQL thread may be busy with checkpoints, and new sessions
            # on the inbox must not wait for it.
            self._next_rebuild = now + REBUILD_INTERVAL_S
            self._rebuild_round += 1
            choose = functools.partial(
                sessions_to_check,
                holds=self.shards.owns,
                running=self.owned,
                round_no=self._rebuild_round,
            )
            self._rebuilding = asyncio.create_task(
                rebuild_lost_sessions(self.ctx, self.store, choose)
            )
        if taken_shards or now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL_S
            if taken_shards:  # every session of the shards just taken, at once
                active = await self.store.active_sessions()
            else:  # a slice per sweep: ten thousand held sessions are not read every 2 s
                self._sweep_at, active = await self.store.scan_active(self._sweep_at, SWEEP_SLICE)
            await self._take([s for s in active if s not in self.owned and self.shards.owns(s)])

    async def _move_shards(self) -> list[int]:
        """One look at the shards: give back what a peer needs (its loops stopped first),
        take what is ours to take; the shards taken."""
        keeper = self._keeper
        assert keeper is not None, "shards are taken only while the lease keeper runs"
        moves = await self.shards.look(self._per_shard)
        for shard in moves.lost:
            self._shard_lost(shard)
        if moves.give_back:
            leaving = set(moves.give_back)
            tasks = [o.task for o in self.owned.values() if o.shard in leaving]
            await self.shards.give_back(moves.give_back, tasks)
        return await self.shards.take(keeper, moves.take)

    async def _take(self, sids: list[str]) -> None:
        """Adopt ``sids`` (of shards held here) and start their loops (two round trips for
        all, which also read what each loop starts from: ShardOwner.adopt, then
        SessionStore.load_plans), a chunk at a time: each chunk's loops run to their
        first writes (a fresh session's first dispatch), which the store sends in one
        round trip (batch_start.py), before the next chunk's loops start."""
        wanted = list(dict.fromkeys(s for s in sids if s and s not in self.owned))
        if not wanted:
            return
        takes = [(sid, f"{self.name}:{uuid.uuid4().hex}") for sid in wanted]
        taken = await self.shards.adopt(wanted)
        # The plans of the whole batch in one more round trip; a loop whose batch could
        # not read them raises why itself.
        loaded = asyncio.ensure_future(self.store.load_plans(taken))
        # A failed load: each loop awaiting it raises (and handles) the error itself.
        loaded.add_done_callback(retrieve_error)
        with self.ctx.admission.starting_batch():  # older loops wait meanwhile
            with contextlib.suppress(Exception):
                await asyncio.shield(loaded)
            for start in range(0, len(takes), BEGIN_CHUNK):
                end = start + BEGIN_CHUNK
                for (sid, token), took in zip(takes[start:end], taken[start:end], strict=True):
                    if took.epoch:
                        self._start_loop(sid, token, took, loaded)
                await asyncio.sleep(0)  # one lap: these loops reach their first writes
        ended = [t.sid for t in taken if not t.epoch and t.ended]
        if ended:  # ended is final: never taken again
            await self.store.r.srem(self.store.keys.active, *ended)

    def _start_loop(self, sid: str, token: str, took: Taken, loaded: asyncio.Future[None]) -> None:
        """Start the loop of a session taken, from what its batch read (``loaded``)."""
        took.loaded = loaded
        runner = SessionRunner(self.ctx, sid, took.epoch, took)
        task = asyncio.create_task(self._drive(runner, token), name=f"session:{sid}")
        task.add_done_callback(lambda _: self._finished.append(sid))
        replaced = self.owned.get(sid)
        if replaced is not None:
            self._per_shard[replaced.shard] -= 1
        self.owned[sid] = held = Owned(token, took.epoch, task, self.shards.shard(sid))
        self._per_shard[held.shard] += 1

    async def _drive(self, runner: SessionRunner, token: str) -> None:
        bind(runner.sid)  # this task's own context: its log lines name the session
        try:
            await self._drive_loop(runner, token)
        finally:
            if self.ctx.events is not None:
                self.ctx.events.leave(runner.sid)

    async def _drive_loop(self, runner: SessionRunner, token: str) -> None:
        sid = runner.sid
        try:  # a loop stopped (cancelled) or ended holds nothing of its own to release
            await runner.run()
        except Exception as exc:
            try:
                await self._after_crash(runner, token, exc)
            except Exception:  # Redis or SQL down as well: the next sweep retries it
                log.exception("session=%s loop crashed and could not be counted", sid)

    async def _after_crash(self, runner: SessionRunner, token: str, exc: Exception) -> None:
        """Settle the crash (process/crashes.py); to cool off, hold the session on its own
        (its lease key: no owner of its shard adopts it until the hold runs out)."""
        sid, applying = runner.sid, runner.applying
        cool_off = await settle_crash(self.ctx, self.store, sid, runner.epoch, applying, exc)
        if cool_off is not None:
            await self.store.r.set(self.store.keys.lease(sid), token, px=int(cool_off * 1000))

    def _forget_finished(self) -> None:
        """Forget the loops that ended (one taken again since keeps its new loop)."""
        ended, self._finished = self._finished, []
        done = [sid for sid in ended if sid in self.owned and self.owned[sid].task.done()]
        for sid in done:
            self._per_shard[self.owned.pop(sid).shard] -= 1
        self.shards.forget(done)

    def _shard_lost(self, shard: int) -> None:
        """A look found a shard held here held by another: stop its loops at once."""
        stopping = {
            sid: o.task for sid, o in self.owned.items() if o.shard == shard and not o.task.done()
        }
        log.error("shard=%d lease lost; stopping its %d loops at once", shard, len(stopping))
        for sid, task in stopping.items():
            # Per session too: an operator looking for one session's story greps its id.
            log.warning("session=%s lease lost with shard=%d; stopping its loop", sid, shard)
            task.cancel()

    def _stop_loops(self, why: str) -> None:
        """Stop every session loop: the shard leases are taken as lost (taken again later)."""
        self.shards.lose_all()
        running = [o for o in self.owned.values() if not o.task.done()]
        log.error("every shard lease lost (%s); stopping %d loops", why, len(running))
        for sid, owned in self.owned.items():
            if not owned.task.done() and not owned.task.cancelling():
                log.warning(
                    "session=%s lease lost with every shard (%s); stopping its loop", sid, why
                )
                owned.task.cancel()

    async def _let_go(self) -> None:
        for owned in self.owned.values():
            owned.task.cancel()
        for owned in self.owned.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await owned.task
        self.owned.clear()
        self._per_shard.clear()
        with contextlib.suppress(redis.RedisError):  # else they expire after their TTL
            await self.shards.release_all()
