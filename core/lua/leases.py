"""Lua of session leases: take, renew (one or many), release, and load what the loops of
sessions just taken start from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planloop.core.lua.script import ENDED, LuaScript, arg, key, rest


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

    PRELUDE = ENDED
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
