"""Lua scripts that make each fenced Redis write atomic: no crash can split them."""

from __future__ import annotations

# The statuses a session ends in (SessionStatus.ended): such a session is final.
_ENDED = """
local ENDED = {completed=true, failed=true, aborted=true, cancelled=true}
"""

# KEYS[1] lease, KEYS[2] session hash. ARGV: token, ttl_ms, owner.
# Takes the lease if free and bumps the session's epoch (the fencing token); returns the
# new epoch, or 0 when someone else holds the lease.
# An ended session is never taken again (ended is final), and one without hot state is left
# to the rebuild path (taking it would create a hash with nothing but an epoch): 0, as for a
# held lease.
ACQUIRE_LEASE = (
    _ENDED
    + """
local status = redis.call('HGET', KEYS[2], 'status')
if not status or ENDED[status] then
  return 0
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
  redis.call('HSET', KEYS[2], 'owner', ARGV[3])
  return epoch
end
return 0
"""
)

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
# An ended session refuses every fenced write too (0): the write that ended it was its last,
# so its status, error, report and compensations are written once.
FENCED_WRITE = (
    _ENDED
    + """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
if ENDED[redis.call('HGET', KEYS[1], 'status')] then
  return 0
end
local allowed = {HSET=true, SET=true, SADD=true, SREM=true, ZADD=true, XADD=true, DEL=true,
                 HDEL=true, EXPIRE=true, LPUSH=true, PUBLISH=true}
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
)

# KEYS[1] session hash. ARGV: the crash's error text.
# Counts one crash of the session's loop and returns {crashes, 1 if a cancel is pending
# else 0, its reason or ''}; {0, 0, ''} when the session has no hot state (Redis lost it:
# the rebuild path restores it, and a hash holding only a count would stop that).
COUNT_CRASH = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0, ''}
end
local crashes = redis.call('HINCRBY', KEYS[1], 'crashes', 1)
redis.call('HSET', KEYS[1], 'last_crash', ARGV[1])
local cancel = redis.call('HGET', KEYS[1], 'cancel_requested')
if cancel then
  return {crashes, 1, cancel}
end
return {crashes, 0, ''}
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

# KEYS[1] step hash, KEYS[2] breaker hash, KEYS[3] and KEYS[4] the broker's unacked hash and
# index. ARGV: attempt, epoch, worker, started_at, cooldown_s ('' = no breaker), delivery tag
# ('' = none), unacked entry.
# A worker claims the attempt it was handed: only the live attempt of a running step, and
# only once. Returns 1 claimed, 2 claimed but the tool's breaker is open (fail fast),
# 0 stale, -1 already started elsewhere (a duplicate delivery). Either way the broker holds
# the message again from here until the outcome (core/broker.py).
START_ATTEMPT = (
    _BREAKER_FUNCTIONS
    + """
if ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[6])
  redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
end
local cur = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'epoch', 'started_at')
if cur[1] ~= 'running' or cur[2] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return 0
end
if cur[4] and tonumber(cur[4]) and tonumber(cur[4]) > 0 then
  return -1
end
redis.call('HSET', KEYS[1], 'worker', ARGV[3], 'started_at', ARGV[4])
if ARGV[5] ~= '' and breaker_allow(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5])) == 'open' then
  return 2
end
return 1
"""
)

# KEYS[1] step hash, KEYS[2] events stream, KEYS[3] blob key, KEYS[4] breaker hash,
# KEYS[5] breaker failure times, KEYS[6] and KEYS[7] the broker's unacked hash and index.
# ARGV: attempt, epoch, status, finished_at, error, error_kind, output_ref, blob,
#       breaker ('' = leave it, 'ok', 'fail'), window_s, threshold, member,
#       delivery tag ('' = none), blob ttl in seconds ('0' = none), then the event's
#       field/value pairs.
# Records one attempt's outcome, counts it on the tool's breaker and appends its event in
# one step; an outcome of a stale attempt (or of a step no longer running) is dropped.
# Either way the message is acknowledged to the broker in the same step.
# Returns the event id, or false.
RECORD_OUTCOME = (
    _BREAKER_FUNCTIONS
    + """
if ARGV[13] ~= '' then
  redis.call('ZREM', KEYS[7], ARGV[13])
  redis.call('HDEL', KEYS[6], ARGV[13])
end
local cur = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'epoch')
if cur[1] ~= 'running' or cur[2] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return false
end
if ARGV[8] ~= '' then
  -- The same output stored before (same content) is not copied again, only kept longer.
  local ttl = tonumber(ARGV[14])
  if ttl > 0 then
    if not redis.call('SET', KEYS[3], ARGV[8], 'NX', 'EX', ttl) then
      redis.call('EXPIRE', KEYS[3], ttl)
    end
  else
    redis.call('SET', KEYS[3], ARGV[8], 'NX')
  end
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'finished_at', ARGV[4], 'error', ARGV[5],
           'error_kind', ARGV[6], 'output_ref', ARGV[7])
if ARGV[9] ~= '' then
  breaker_record(KEYS[4], KEYS[5], tonumber(ARGV[4]), ARGV[9] == 'ok', tonumber(ARGV[10]),
                 tonumber(ARGV[11]), ARGV[12])
end
local fields = {}
for i = 15, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[2], '*', unpack(fields))
"""
)

# KEYS[1] a Celery queue (a list of messages). ARGV: text to look for (a task id as the
# message headers spell it). Returns 1 when a queued message contains it, else 0. Runs only
# for an attempt whose second copy went out and is still unclaimed, so seldom. Looks from
# the tail, where the oldest messages wait (kombu pushes on the left, pops on the right):
# an unclaimed attempt's copies are older than most of the queue.
QUEUED = """
local n = redis.call('LLEN', KEYS[1])
for last = -1, -n, -100 do
  for _, message in ipairs(redis.call('LRANGE', KEYS[1], math.max(last - 99, -n), last)) do
    if string.find(message, ARGV[1], 1, true) then
      return 1
    end
  end
end
return 0
"""
