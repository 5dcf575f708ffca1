"""Lua scripts that make each fenced Redis write atomic: no crash can split them."""

from __future__ import annotations

# KEYS[1] lease, KEYS[2] session hash. ARGV: token, ttl_ms, owner.
# Takes the lease if free and bumps the session's epoch (the fencing token); returns the
# new epoch, or 0 when someone else holds the lease.
ACQUIRE_LEASE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
  redis.call('HSET', KEYS[2], 'owner', ARGV[3])
  return epoch
end
return 0
"""

# KEYS[1] lease. ARGV: token, ttl_ms. Compare-and-extend.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS[1] lease. ARGV: token. Compare-and-delete.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] session hash, KEYS[2..n] targets. ARGV[1] epoch, ARGV[2] JSON list of ops, each
# [command, key_index, arg...] with key_index into KEYS. Runs every op only when the
# session's epoch is still ARGV[1]; returns 1, or 0 when fenced out.
FENCED_WRITE = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
local allowed = {HSET=true, SET=true, SADD=true, SREM=true, ZADD=true, XADD=true, DEL=true,
                 HDEL=true, EXPIRE=true}
for _, op in ipairs(cjson.decode(ARGV[2])) do
  local cmd = op[1]
  if not allowed[cmd] then
    return redis.error_reply('fenced_write: command not allowed: ' .. tostring(cmd))
  end
  local args = {}
  for i = 3, #op do args[#args + 1] = tostring(op[i]) end
  redis.call(cmd, KEYS[op[2]], unpack(args))
end
return 1
"""

# KEYS[1] step hash. ARGV: attempt, epoch, worker, started_at.
# A worker claims the attempt it was handed: only the live attempt of a running step, and
# only once (a duplicate delivery of an attempt already started is dropped).
START_ATTEMPT = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'epoch', 'started_at')
if cur[1] ~= 'running' or cur[2] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return 0
end
if cur[4] and tonumber(cur[4]) and tonumber(cur[4]) > 0 then
  return -1
end
redis.call('HSET', KEYS[1], 'worker', ARGV[3], 'started_at', ARGV[4])
return 1
"""

# KEYS[1] step hash, KEYS[2] events stream, KEYS[3] blob key.
# ARGV: attempt, epoch, status, finished_at, error, error_kind, output_ref, blob,
#       then the event's field/value pairs.
# Records one attempt's outcome and appends its event in one step; an outcome of a stale
# attempt (or of a step no longer running) is dropped. Returns the event id, or false.
RECORD_OUTCOME = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'epoch')
if cur[1] ~= 'running' or cur[2] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return false
end
if ARGV[8] ~= '' then
  redis.call('SET', KEYS[3], ARGV[8], 'NX')
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'finished_at', ARGV[4], 'error', ARGV[5],
           'error_kind', ARGV[6], 'output_ref', ARGV[7])
local fields = {}
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[2], '*', unpack(fields))
"""

# KEYS[1] session hash, KEYS[2] step hash, KEYS[3] events stream.
# ARGV: epoch, attempt, status, error, error_kind, finished_at, then event field/value pairs.
# The supervisor ends an attempt it gave up on (lost worker, cancel): only while it owns the
# session and only if that attempt is still the running one; the worker's late outcome is
# then dropped by RECORD_OUTCOME. Returns the event id, or false.
END_ATTEMPT = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return false
end
local cur = redis.call('HMGET', KEYS[2], 'status', 'attempt')
if cur[1] ~= 'running' or cur[2] ~= ARGV[2] then
  return false
end
redis.call('HSET', KEYS[2], 'status', ARGV[3], 'error', ARGV[4], 'error_kind', ARGV[5],
           'finished_at', ARGV[6])
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[3], '*', unpack(fields))
"""

# KEYS[1] breaker hash. ARGV: now, cooldown_s.
# Returns 'closed' (run), 'probe' (run as the half-open probe) or 'open' (fail fast).
BREAKER_ALLOW = """
local b = redis.call('HMGET', KEYS[1], 'state', 'opened_at', 'probe_at')
local now, cooldown = tonumber(ARGV[1]), tonumber(ARGV[2])
if b[1] == 'open' then
  if now >= tonumber(b[2]) + cooldown then
    redis.call('HSET', KEYS[1], 'state', 'half_open', 'probe_at', ARGV[1])
    return 'probe'
  end
  return 'open'
end
if b[1] == 'half_open' then
  if now >= tonumber(b[3]) + cooldown then
    redis.call('HSET', KEYS[1], 'probe_at', ARGV[1])
    return 'probe'
  end
  return 'open'
end
return 'closed'
"""

# KEYS[1] breaker hash, KEYS[2] failure timestamps (zset).
# ARGV: now, ok ('1'/'0'), window_s, threshold, member.
# Returns the breaker's state after recording the outcome.
BREAKER_RECORD = """
local now = tonumber(ARGV[1])
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
if ARGV[2] == '1' then
  if state ~= 'closed' then
    redis.call('HSET', KEYS[1], 'state', 'closed')
    redis.call('DEL', KEYS[2])
  end
  return 'closed'
end
redis.call('ZADD', KEYS[2], now, ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
if state == 'half_open' or redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', ARGV[1])
  return 'open'
end
return state
"""
