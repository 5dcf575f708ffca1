"""Lua scripts that make each fenced Redis write atomic: no crash can split them.

Each script is a frozen dataclass whose fields are its KEYS and ARGV, in order: the one place
its argument list is written. The Lua source opens by naming them (``local step_key =
KEYS[1]``, as arq does), so the body reads by name; the dataclass is the typed Python wrapper,
built with keywords and run through a client's registered copy of the script::

    record = RecordOutcome.register(client)          # once per client
    record(RecordOutcome(step_key=..., attempt=..., ...))

Fields: :func:`key` (one of KEYS), :func:`arg` (one of ARGV), and at most one trailing
:func:`rest` (the remaining KEYS or ARGV, as a Lua table).
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Generic, Literal, TypeVar

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript, Script

Role = Literal["key", "arg", "rest_keys", "rest_args"]
Arg = str | int | float
_ROLE = "lua"
_LUA_KEYWORDS = frozenset(
    {"and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in"}
    | {"local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"}
)
_SOURCES: dict[type[LuaScript], str] = {}
_LAYOUTS: dict[type[LuaScript], _Layout] = {}


def key() -> Any:
    """A field that is one of the script's KEYS."""
    return field(metadata={_ROLE: "key"})


def arg() -> Any:
    """A field that is one of the script's ARGV."""
    return field(metadata={_ROLE: "arg"})


def rest(role: Literal["rest_keys", "rest_args"]) -> Any:
    """The last field: the remaining KEYS or ARGV, a Lua table of that name in the script."""
    return field(default=(), metadata={_ROLE: role})


S = TypeVar("S", bound="LuaScript")


@dataclass(frozen=True, kw_only=True)
class LuaScript:
    """One script's call: subclasses declare fields and ``BODY`` (and a shared ``PRELUDE``)."""

    BODY: ClassVar[str]
    PRELUDE: ClassVar[str] = ""  # Lua tables and functions shared by several scripts

    @classmethod
    def source(cls) -> str:
        if cls not in _SOURCES:
            _SOURCES[cls] = _source(cls)
        return _SOURCES[cls]

    def keys_and_args(self) -> tuple[list[str], list[Arg]]:
        """KEYS and ARGV of this call, in the order the fields are declared."""
        layout = _layout(type(self))
        keys: list[str] = [getattr(self, name) for name in layout.keys]
        args: list[Arg] = [getattr(self, name) for name in layout.args]
        if layout.rest_keys:
            keys += getattr(self, layout.rest_keys)
        if layout.rest_args:
            args += getattr(self, layout.rest_args)
        return keys, args

    @classmethod
    def register(cls: type[S], client: redis.Redis) -> Registered[S]:
        """This script on ``client`` (or, per call, on one of its pipelines)."""
        return Registered(client.register_script(cls.source()))

    @classmethod
    def register_async(cls: type[S], client: aioredis.Redis) -> AsyncRegistered[S]:
        return AsyncRegistered(client.register_script(cls.source()))


class Registered(Generic[S]):
    """A script loaded on a sync client: call it with the script's dataclass."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def __call__(self, call: S, *, client: Any = None) -> Any:
        keys, args = call.keys_and_args()
        return self.script(keys=keys, args=args, client=client)


class AsyncRegistered(Generic[S]):
    """A script loaded on an asyncio client: await it with the script's dataclass."""

    def __init__(self, script: AsyncScript) -> None:
        self.script = script

    async def __call__(self, call: S, *, client: Any = None) -> Any:
        keys, args = call.keys_and_args()
        return await self.script(keys=keys, args=args, client=client)


@dataclass(frozen=True)
class _Layout:
    """Which fields of a script are its KEYS and ARGV (worked out once per script: a call
    lays out its arguments on every step's hot path)."""

    keys: tuple[str, ...]
    args: tuple[str, ...]
    rest_keys: str = ""
    rest_args: str = ""


def _layout(cls: type[LuaScript]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        by_role: dict[str, list[str]] = {"key": [], "arg": [], "rest_keys": [], "rest_args": []}
        for f in fields(cls):
            by_role[f.metadata[_ROLE]].append(f.name)
        layout = _Layout(
            tuple(by_role["key"]),
            tuple(by_role["arg"]),
            next(iter(by_role["rest_keys"]), ""),
            next(iter(by_role["rest_args"]), ""),
        )
        _LAYOUTS[cls] = layout
    return layout


def _source(cls: type[LuaScript]) -> str:
    """``cls``'s Lua: its KEYS and ARGV named, then the prelude, then the body."""
    lines: list[str] = []
    counts = {"key": 0, "arg": 0}
    declared = fields(cls)
    for f in declared:
        if keyword.iskeyword(f.name) or f.name in _LUA_KEYWORDS:
            raise ValueError(f"{cls.__name__}.{f.name}: a reserved word in Lua or Python")
        role = f.metadata[_ROLE]
        table = "KEYS" if role in ("key", "rest_keys") else "ARGV"
        kind = "key" if table == "KEYS" else "arg"
        if role in ("key", "arg"):
            counts[kind] += 1
            lines.append(f"local {f.name} = {table}[{counts[kind]}]")
        elif f is not declared[-1]:
            raise ValueError(f"{cls.__name__}.{f.name}: the remaining KEYS or ARGV come last")
        else:
            # a loop, not unpack(): unpack stops at a few thousand values
            lines.append(
                f"local {f.name} = {{}}\n"
                f"for i = {counts[kind] + 1}, #{table} do {f.name}[#{f.name} + 1] = {table}[i] end"
            )
    return "\n".join(lines) + "\n" + cls.PRELUDE + cls.BODY


# The statuses a session ends in (SessionStatus.ended): such a session is final.
_ENDED = """
local ENDED = {completed=true, failed=true, aborted=true, cancelled=true}
"""


@dataclass(frozen=True, kw_only=True)
class AcquireLease(LuaScript):
    """Take the lease if free and bump the session's epoch (the fencing token).

    Returns the new epoch, or 0 when someone else holds the lease. An ended session is never
    taken again (ended is final), and one without hot state is left to the rebuild path
    (taking it would create a hash with nothing but an epoch): 0, as for a held lease.
    """

    lease_key: str = key()
    session_key: str = key()
    token: str = arg()
    ttl_ms: int = arg()
    owner: str = arg()

    PRELUDE = _ENDED
    BODY = """
local status = redis.call('HGET', session_key, 'status')
if not status or ENDED[status] then
  return 0
end
if redis.call('SET', lease_key, token, 'NX', 'PX', ttl_ms) then
  local epoch = redis.call('HINCRBY', session_key, 'epoch', 1)
  redis.call('HSET', session_key, 'owner', owner)
  return epoch
end
return 0
"""


@dataclass(frozen=True, kw_only=True)
class RenewLease(LuaScript):
    """Compare-and-extend: 1 when ``token`` still holds the lease, else 0."""

    lease_key: str = key()
    token: str = arg()
    ttl_ms: int = arg()

    BODY = """
if redis.call('GET', lease_key) == token then
  return redis.call('PEXPIRE', lease_key, ttl_ms)
end
return 0
"""


@dataclass(frozen=True, kw_only=True)
class RenewLeases(LuaScript):
    """:class:`RenewLease` for many leases in one call: per lease, 1 when its token still
    holds it (extended), else 0. ``tokens`` is a JSON list, one per key of ``lease_keys``.

    A thousand leases are one command of two thousand arguments instead of a thousand
    EVALSHA calls: the keeper's renewal round costs a few milliseconds of its thread,
    which a busy supervisor shares with its event loop under one GIL.
    """

    ttl_ms: int = arg()
    tokens: str = arg()
    lease_keys: Sequence[str] = rest("rest_keys")

    BODY = """
local held = {}
for i, token in ipairs(cjson.decode(tokens)) do
  if redis.call('GET', lease_keys[i]) == token then
    held[i] = redis.call('PEXPIRE', lease_keys[i], ttl_ms)
  else
    held[i] = 0
  end
end
return held
"""


@dataclass(frozen=True, kw_only=True)
class LoadStarts(LuaScript):
    """What the loops of a batch of sessions just taken start from, in one call: per
    session, the plan version it runs (nil when there is none) and how many events were
    delivered to a consumer and not acknowledged (a former owner's, to take over), its
    events group created first if Redis lost it. ``session_keys`` alternates each session's
    plan key and events stream.

    One command for a batch instead of three per session (GET, XGROUP CREATE, XPENDING):
    a burst of a thousand submits is taken in a few such calls, and the supervisor parses
    one flat reply per call, not a thousand errors and summaries.
    """

    group: str = arg()
    session_keys: Sequence[str] = rest("rest_keys")

    BODY = """
local out = {}
for i = 1, #session_keys, 2 do
  local events_key = session_keys[i + 1]
  local made = redis.pcall('XGROUP', 'CREATE', events_key, group, '0', 'MKSTREAM')
  if type(made) == 'table' and made.err and not string.find(made.err, 'BUSYGROUP', 1, true) then
    return redis.error_reply(made.err)
  end
  out[#out + 1] = redis.call('GET', session_keys[i])
  out[#out + 1] = redis.call('XPENDING', events_key, group)[1]
end
return out
"""


@dataclass(frozen=True, kw_only=True)
class ReleaseLease(LuaScript):
    """Compare-and-delete: 1 when ``token`` held the lease, else 0."""

    lease_key: str = key()
    token: str = arg()

    BODY = """
if redis.call('GET', lease_key) == token then
  return redis.call('DEL', lease_key)
end
return 0
"""


@dataclass(frozen=True, kw_only=True)
class FencedWrite(LuaScript):
    """Run every op only while the session's epoch is still ``epoch``: 1, or 0 when fenced out.

    ``ops`` is a JSON list of ``[command, target index (1-based into target_keys), arg...]``.
    An ended session refuses every fenced write too (0): the write that ended it was its
    last, so its status, error, report and compensations are written once.
    """

    session_key: str = key()
    epoch: int = arg()
    ops: str = arg()
    target_keys: Sequence[str] = rest("rest_keys")

    PRELUDE = _ENDED
    BODY = """
if redis.call('HGET', session_key, 'epoch') ~= epoch then
  return 0
end
if ENDED[redis.call('HGET', session_key, 'status')] then
  return 0
end
local allowed = {HSET=true, SET=true, SADD=true, SREM=true, ZADD=true, XADD=true, DEL=true,
                 HDEL=true, EXPIRE=true, LPUSH=true, PUBLISH=true}
for _, op in ipairs(cjson.decode(ops)) do
  local cmd = op[1]
  if not allowed[cmd] then
    return redis.error_reply('fenced_write: command not allowed: ' .. tostring(cmd))
  end
  local args = {}
  for i = 3, #op do args[#args + 1] = tostring(op[i]) end
  redis.call(cmd, target_keys[op[2]], unpack(args))
end
return 1
"""


@dataclass(frozen=True, kw_only=True)
class CountCrash(LuaScript):
    """Count one crash of the session's loop.

    Returns ``{crashes, 1 if a cancel is pending else 0, its reason or ''}``; ``{0, 0, ''}``
    when the session has no hot state (Redis lost it: the rebuild path restores it, and a
    hash holding only a count would stop that).
    """

    session_key: str = key()
    error: str = arg()

    BODY = """
if redis.call('EXISTS', session_key) == 0 then
  return {0, 0, ''}
end
local crashes = redis.call('HINCRBY', session_key, 'crashes', 1)
redis.call('HSET', session_key, 'last_crash', error)
local cancel = redis.call('HGET', session_key, 'cancel_requested')
if cancel then
  return {crashes, 1, cancel}
end
return {crashes, 0, ''}
"""


@dataclass(frozen=True, kw_only=True)
class EndAttempt(LuaScript):
    """The supervisor ends an attempt it gave up on (lost worker, cancel).

    Only while it owns the session and only if that attempt is still the running one; the
    worker's late outcome is then dropped by :class:`RecordOutcome`. Returns the event id,
    or false.
    """

    session_key: str = key()
    step_key: str = key()
    events_key: str = key()
    epoch: int = arg()
    attempt: int = arg()
    status: str = arg()
    error: str = arg()
    error_kind: str = arg()
    finished_at: str = arg()
    event_fields: Sequence[str] = rest("rest_args")

    BODY = """
if redis.call('HGET', session_key, 'epoch') ~= epoch then
  return false
end
local cur = redis.call('HMGET', step_key, 'status', 'attempt')
if cur[1] ~= 'running' or cur[2] ~= attempt then
  return false
end
redis.call('HSET', step_key, 'status', status, 'error', error, 'error_kind', error_kind,
           'finished_at', finished_at)
return redis.call('XADD', events_key, '*', unpack(event_fields))
"""


# Circuit breaker of one tool: a hash (state, opened_at, probe_at) and a zset of recent
# failure times. Shared as Lua functions so the worker's claim and record scripts check and
# count in the same round trip as the attempt itself.
_BREAKER_FUNCTIONS = """
local function breaker_allow(key, now, cooldown)
  local b = redis.call('HMGET', key, 'state', 'opened_at', 'probe_at')
  if b[1] == 'open' or b[1] == 'half_open' then
    local since = tonumber(b[1] == 'open' and b[2] or b[3])
    if now >= since + cooldown then
      redis.call('HSET', key, 'state', 'half_open', 'probe_at', now)
      return 'probe'
    end
    return 'open'
  end
  return 'closed'
end

local function breaker_record(key, failures, now, ok, window, threshold, member)
  local state = redis.call('HGET', key, 'state') or 'closed'
  if ok then
    if state ~= 'closed' then
      redis.call('HSET', key, 'state', 'closed')
      redis.call('DEL', failures)
    end
    return 'closed'
  end
  redis.call('ZADD', failures, now, member)
  redis.call('ZREMRANGEBYSCORE', failures, '-inf', now - window)
  if state == 'half_open' or redis.call('ZCARD', failures) >= threshold then
    redis.call('HSET', key, 'state', 'open', 'opened_at', now)
    return 'open'
  end
  return state
end
"""


@dataclass(frozen=True, kw_only=True)
class StartAttempt(LuaScript):
    """A worker claims the attempt it was handed: only the live attempt of a running step,
    and only once.

    Returns 1 claimed, 2 claimed but the tool's breaker is open (fail fast), 0 stale, -1
    already started elsewhere (a duplicate delivery). Either way the broker holds the message
    again from here until the outcome (core/receipts.py): ``unacked_entry`` goes back under
    ``delivery_tag`` ('' = none). ``cooldown_s`` '' = no breaker.
    """

    step_key: str = key()
    breaker_key: str = key()
    unacked_key: str = key()
    unacked_index_key: str = key()
    attempt: int = arg()
    epoch: int = arg()
    worker: str = arg()
    started_at: str = arg()
    cooldown_s: str | float = arg()
    delivery_tag: str = arg()
    unacked_entry: str = arg()

    PRELUDE = _BREAKER_FUNCTIONS
    BODY = """
if delivery_tag ~= '' then
  redis.call('ZADD', unacked_index_key, started_at, delivery_tag)
  redis.call('HSET', unacked_key, delivery_tag, unacked_entry)
end
local cur = redis.call('HMGET', step_key, 'status', 'attempt', 'epoch', 'started_at')
if cur[1] ~= 'running' or cur[2] ~= attempt or cur[3] ~= epoch then
  return 0
end
if cur[4] and tonumber(cur[4]) and tonumber(cur[4]) > 0 then
  return -1
end
redis.call('HSET', step_key, 'worker', worker, 'started_at', started_at)
if cooldown_s ~= '' and
   breaker_allow(breaker_key, tonumber(started_at), tonumber(cooldown_s)) == 'open' then
  return 2
end
return 1
"""


@dataclass(frozen=True, kw_only=True)
class RecordOutcome(LuaScript):
    """Record one attempt's outcome, count it on the tool's breaker and append its event in
    one step; an outcome of a stale attempt (or of a step no longer running) is dropped.

    Either way the message is acknowledged to the broker in the same step (``delivery_tag``
    '' = none). ``blob`` is the output's JSON ('' = none) stored under ``blob_key`` for
    ``blob_ttl_s`` seconds (0 = no expiry); ``breaker_mode`` '' leaves the breaker alone,
    'ok' or 'fail' counts the outcome. Returns the event id, or false.
    """

    step_key: str = key()
    events_key: str = key()
    blob_key: str = key()
    breaker_key: str = key()
    breaker_failures_key: str = key()
    unacked_key: str = key()
    unacked_index_key: str = key()
    attempt: int = arg()
    epoch: int = arg()
    status: str = arg()
    finished_at: str = arg()
    error: str = arg()
    error_kind: str = arg()
    output_ref: str = arg()
    blob: str = arg()
    breaker_mode: str = arg()
    window_s: float = arg()
    threshold: int = arg()
    failure_member: str = arg()
    delivery_tag: str = arg()
    blob_ttl_s: int = arg()
    event_fields: Sequence[str] = rest("rest_args")

    PRELUDE = _BREAKER_FUNCTIONS
    BODY = """
if delivery_tag ~= '' then
  redis.call('ZREM', unacked_index_key, delivery_tag)
  redis.call('HDEL', unacked_key, delivery_tag)
end
local cur = redis.call('HMGET', step_key, 'status', 'attempt', 'epoch')
if cur[1] ~= 'running' or cur[2] ~= attempt or cur[3] ~= epoch then
  return false
end
if blob ~= '' then
  -- The same output stored before (same content) is not copied again, only kept longer.
  local ttl = tonumber(blob_ttl_s)
  if ttl > 0 then
    if not redis.call('SET', blob_key, blob, 'NX', 'EX', ttl) then
      redis.call('EXPIRE', blob_key, ttl)
    end
  else
    redis.call('SET', blob_key, blob, 'NX')
  end
end
redis.call('HSET', step_key, 'status', status, 'finished_at', finished_at, 'error', error,
           'error_kind', error_kind, 'output_ref', output_ref)
if breaker_mode ~= '' then
  breaker_record(breaker_key, breaker_failures_key, tonumber(finished_at), breaker_mode == 'ok',
                 tonumber(window_s), tonumber(threshold), failure_member)
end
return redis.call('XADD', events_key, '*', unpack(event_fields))
"""


@dataclass(frozen=True, kw_only=True)
class BreakerAllow(LuaScript):
    """Whether one tool call outside a step's own claim may run (an agent step's calls):
    'closed', 'probe' (the half-open trial call) or 'open' (fail fast)."""

    breaker_key: str = key()
    now: str = arg()
    cooldown_s: float = arg()

    PRELUDE = _BREAKER_FUNCTIONS
    BODY = """
return breaker_allow(breaker_key, tonumber(now), tonumber(cooldown_s))
"""


@dataclass(frozen=True, kw_only=True)
class BreakerRecord(LuaScript):
    """Count one tool call's outcome (``ok``: 'ok' or 'fail') on the tool's breaker; returns
    the breaker's state after it."""

    breaker_key: str = key()
    breaker_failures_key: str = key()
    now: str = arg()
    ok: str = arg()
    window_s: float = arg()
    threshold: int = arg()
    failure_member: str = arg()

    PRELUDE = _BREAKER_FUNCTIONS
    BODY = """
return breaker_record(breaker_key, breaker_failures_key, tonumber(now), ok == 'ok',
                      tonumber(window_s), tonumber(threshold), failure_member)
"""


@dataclass(frozen=True, kw_only=True)
class Queued(LuaScript):
    """1 when a message in the Celery queue ``queue_key`` contains ``needle``, else 0.

    ``needle`` is a task id as the message headers spell it. Runs only for an attempt whose
    second copy went out and is still unclaimed, so seldom. Looks from the tail, where the
    oldest messages wait (kombu pushes on the left, pops on the right): an unclaimed
    attempt's copies are older than most of the queue.
    """

    queue_key: str = key()
    needle: str = arg()

    BODY = """
local n = redis.call('LLEN', queue_key)
for last = -1, -n, -100 do
  for _, message in ipairs(redis.call('LRANGE', queue_key, math.max(last - 99, -n), last)) do
    if string.find(message, needle, 1, true) then
      return 1
    end
  end
end
return 0
"""
