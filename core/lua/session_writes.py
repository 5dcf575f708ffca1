"""Lua of a session's own writes: every fenced write of its owner, and its loop's crash count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planloop.core.lua.script import ENDED, LuaScript, arg, key, rest


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

    PRELUDE = ENDED
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
