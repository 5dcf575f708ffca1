"""Lua of leases and starts: give back a lease (a shard's, or a session's hold), and load what
the loops of sessions just taken start from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planloop.core.lua.script import LuaScript, arg, key, rest


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
