"""Lua of session shards: take a shard, and adopt one session of a shard taken.

A shard is given back like a lease (``ReleaseLease`` over its key); its hold is kept alive
by its holder's liveness key, not by the shard's key (core/shards.py). Each script here
stays in one Redis Cluster slot: the shard's two keys share the tag ``{shard-<n>}``, a
session's two keys the tag ``{<sid>}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planloop.core.lua.script import ENDED, LuaScript, arg, key


@dataclass(frozen=True, kw_only=True)
class AcquireShard(LuaScript):
    """Take a free shard: its new fencing epoch, or 0 when its key no longer names ``seen``.

    ``seen`` is the token the caller found there ('' = none), whose liveness key it found
    gone: such a token never holds again, so only a take that raced this one can have
    changed the key since. The epoch lives in a key of its own that never expires, so each
    take of a shard gets a larger epoch than every take before it, whoever made them.
    """

    shard_lease_key: str = key()
    shard_epoch_key: str = key()
    token: str = arg()
    seen: str = arg()

    BODY = """
if (redis.call('GET', shard_lease_key) or '') ~= seen then
  return 0
end
redis.call('SET', shard_lease_key, token)
return redis.call('INCR', shard_epoch_key)
"""


@dataclass(frozen=True, kw_only=True)
class AdoptSession(LuaScript):
    """Make the owner of the session's shard the session's owner: bump the session's epoch
    (the fencing token every write of the session is compared with), so a former owner
    that is merely paused is refused from its next write on.

    Returns the new epoch, or 0 when the session is not adopted:

    * ended (ended is final), or without hot state (left to the rebuild path);
    * held on its own (``lease_key``): a crashed loop cooling off, or a supervisor of a
      release before shards, whose lease runs out by itself if it is gone;
    * adopted already under a later epoch of the same shard (``shard`` names the shard and
      the shard count): this caller lost the shard while it was paused.
    """

    lease_key: str = key()
    session_key: str = key()
    owner: str = arg()
    shard: str = arg()
    shard_epoch: int = arg()

    PRELUDE = ENDED
    BODY = """
local status = redis.call('HGET', session_key, 'status')
if not status or ENDED[status] then
  return 0
end
if redis.call('EXISTS', lease_key) == 1 then
  return 0
end
local seen = redis.call('HMGET', session_key, 'shard', 'shard_epoch')
if seen[1] == shard and (tonumber(seen[2]) or 0) > tonumber(shard_epoch) then
  return 0
end
local epoch = redis.call('HINCRBY', session_key, 'epoch', 1)
redis.call('HSET', session_key, 'owner', owner, 'shard', shard, 'shard_epoch', shard_epoch)
return epoch
"""
