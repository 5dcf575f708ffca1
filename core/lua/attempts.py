"""Lua of a step attempt's life: claimed by a worker, its outcome recorded, ended by the
supervisor, and looked for in its Celery queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planloop.core.lua.breakers import BREAKER_FUNCTIONS
from planloop.core.lua.script import LuaScript, arg, key, rest


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


@dataclass(frozen=True, kw_only=True)
class StartAttempt(LuaScript):
    """A worker claims the attempt it was handed: only the live attempt of a running step,
    and only once.

    Returns 1 claimed, 3 claimed as the half-open breaker's trial call, 2 claimed but the
    tool's breaker is open (fail fast), 0 stale, -1 already started elsewhere (a duplicate
    delivery). Either way the broker holds the message
    again from here until the outcome (core/receipts.py): ``delivery_tag`` is indexed as
    received now ('' = none), and ``unacked_entry`` goes back under it ('' = the dispatch
    wrote the entry already). ``cooldown_s`` '' = no breaker.
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

    PRELUDE = BREAKER_FUNCTIONS
    BODY = """
if delivery_tag ~= '' then
  redis.call('ZADD', unacked_index_key, started_at, delivery_tag)
  if unacked_entry ~= '' then
    redis.call('HSET', unacked_key, delivery_tag, unacked_entry)
  end
end
local cur = redis.call('HMGET', step_key, 'status', 'attempt', 'epoch', 'started_at')
if cur[1] ~= 'running' or cur[2] ~= attempt or cur[3] ~= epoch then
  return 0
end
if cur[4] and tonumber(cur[4]) and tonumber(cur[4]) > 0 then
  return -1
end
redis.call('HSET', step_key, 'worker', worker, 'started_at', started_at)
if cooldown_s ~= '' then
  local allowed = breaker_allow(breaker_key, tonumber(started_at), tonumber(cooldown_s))
  if allowed == 'open' then
    return 2
  elseif allowed == 'probe' then
    return 3
  end
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

    PRELUDE = BREAKER_FUNCTIONS
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
  -- Content-addressed: the same output stored before is the same value, so one SET both
  -- stores it and keeps it longer (a SET NX then an EXPIRE cost a command more).
  local ttl = tonumber(blob_ttl_s)
  if ttl > 0 then
    redis.call('SET', blob_key, blob, 'EX', ttl)
  else
    redis.call('SET', blob_key, blob)
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
