"""Lua of a session's own writes: every fenced write of its owner, and its loop's crash count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planloop.core.lua.script import ENDED, LuaScript, arg, key, rest

# The fenced write's op that queues a step message and holds its unacked entry:
# ("QUEUE", queue, [message, unacked hash, delivery tag, entry tail]); see FencedWrite (which
# gets the message as an ARGV of its own).
QUEUE = "QUEUE"


def as_commands(command: str, key: str, args: Sequence[Any]) -> list[tuple[str, str, list[Any]]]:
    """The plain Redis commands an op stands for (a ``QUEUE`` op is two), for a caller that
    runs ops itself rather than through :class:`FencedWrite`."""
    if command != QUEUE:
        return [(command, key, list(args))]
    message, unacked, tag, tail = args
    return [("LPUSH", key, [message]), ("HSET", unacked, [tag, f"[{message}, {tail}]"])]


@dataclass(frozen=True, kw_only=True)
class FencedWrite(LuaScript):
    """Run every op only while the session's epoch is still ``epoch``: 1, or 0 when fenced out.

    ``ops`` is a JSON list of ``[command, target index (1-based into target_keys), arg...]``.
    An ended session refuses every fenced write too (0): the write that ended it was its
    last, so its status, error, report and compensations are written once.

    ``QUEUE`` queues a step message: ``[QUEUE, queue index, message index (1-based into
    messages), unacked hash index, delivery tag, entry tail]`` LPUSHes the message and writes
    kombu's unacked entry of it (``[message, <tail>]``, core/receipts.py) from the same
    argument, so the message crosses the wire once: the worker's claim then only indexes the
    entry, without a second copy. The message is an ARGV of its own, not a string in ``ops``:
    being JSON, inside ``ops`` every quote of it would be escaped (a tenth more bytes).
    """

    session_key: str = key()
    epoch: int = arg()
    ops: str = arg()
    target_keys: Sequence[str] = rest("rest_keys")
    messages: Sequence[str] = rest("rest_args")

    PRELUDE = ENDED
    BODY = """
local owner = redis.call('HMGET', session_key, 'epoch', 'status')
if owner[1] ~= epoch or ENDED[owner[2]] then
  return 0
end
local allowed = {HSET=true, SET=true, SADD=true, SREM=true, ZADD=true, XADD=true, DEL=true,
                 HDEL=true, EXPIRE=true, LPUSH=true, PUBLISH=true}
for _, op in ipairs(cjson.decode(ops)) do
  local cmd = op[1]
  if cmd == 'QUEUE' then
    local message = messages[op[3]]
    redis.call('LPUSH', target_keys[op[2]], message)
    redis.call('HSET', target_keys[op[4]], op[5], '[' .. message .. ',' .. op[6] .. ']')
  elseif not allowed[cmd] then
    return redis.error_reply('fenced_write: command not allowed: ' .. tostring(cmd))
  else
    local args = {}
    for i = 3, #op do args[#args + 1] = tostring(op[i]) end
    redis.call(cmd, target_keys[op[2]], unpack(args))
  end
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
