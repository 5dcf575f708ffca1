"""Lua of a tool's circuit breaker: the shared functions, and the two scripts an agent step's
tool calls use outside a step's claim."""

from __future__ import annotations

from dataclasses import dataclass

from planloop.core.lua.script import LuaScript, arg, key

# Circuit breaker of one tool: a hash (state, opened_at, probe_at) and a zset of recent
# failure times. Shared as Lua functions so the worker's claim and record scripts check and
# count in the same round trip as the attempt itself.
BREAKER_FUNCTIONS = """
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
class BreakerAllow(LuaScript):
    """Whether one tool call outside a step's own claim may run (an agent step's calls):
    'closed', 'probe' (the half-open trial call) or 'open' (fail fast)."""

    breaker_key: str = key()
    now: str = arg()
    cooldown_s: float = arg()

    PRELUDE = BREAKER_FUNCTIONS
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

    PRELUDE = BREAKER_FUNCTIONS
    BODY = """
return breaker_record(breaker_key, breaker_failures_key, tonumber(now), ok == 'ok',
                      tonumber(window_s), tonumber(threshold), failure_member)
"""
