-- acquire_fair.lua: take a lease in the order its waiters came.
-- KEYS[1] lease key, KEYS[2] generation key, and for a campaign KEYS[3]
--   value key
-- ARGV[1] identity (the waiter's, and the lease's when granted), ARGV[2]
--   ttl_ms, ARGV[3] generation, ARGV[4] generation key TTL in seconds ('0':
--   none), ARGV[5] waiter TTL in ms, ARGV[6] '1': join the queue when not
--   granted ('0': never), ARGV[7] 'PUBLISH' or 'SPUBLISH', and for a
--   campaign ARGV[8] its value (as acquire.lua's ARGV[5])
-- The queue: <lease key>:queue, a sorted set of waiters' identities by
--   arrival number (its TTL at least the waiter TTL); a waiter lives while
--   its key <lease key>:queue:<identity> does (PX ARGV[5], set again by each
--   of its requests).  The head is the first live waiter; the dead ones met
--   on the way are removed, each once.
-- Replies: {1, generation} acquired, as acquire.lua's, when nobody holds the
--   lease and this waiter is the head or nobody waits (it leaves the queue);
--   {0, PTTL of the lease key, position} busy: held, or another waiter is
--   the head ('-1': then the head is woken on <lease key>:wake:<its
--   identity>); position is this waiter's rank in the queue (0: the head),
--   -1 when it did not join; {2, stored generation} stale, as acquire.lua's
--   (a waiter keeps its place).  An error reply if ttl_ms or the waiter TTL
--   is not a positive integer; LFOVERSIZED as acquire.lua's.
-- Every reply and what it means: scripts/answers.json.
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 or ttl % 1 ~= 0 then
  return redis.error_reply('ERR lease_fence: ttl must be a positive integer')
end
local wttl = tonumber(ARGV[5])
if not wttl or wttl <= 0 or wttl % 1 ~= 0 then
  return redis.error_reply('ERR lease_fence: the waiter ttl must be a positive integer')
end
local me = ARGV[1]
local q = KEYS[1] .. ':queue'
local function wait(pttl)
  if ARGV[6] ~= '1' then return {0, pttl, -1} end
  if not redis.call('ZSCORE', q, me) then
    local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
    local n = 1
    if #last == 2 then n = tonumber(last[2]) + 1 end
    redis.call('ZADD', q, n, me)
  end
  redis.call('SET', q .. ':' .. me, '1', 'PX', ARGV[5])
  if redis.call('PTTL', q) < wttl then redis.call('PEXPIRE', q, ARGV[5]) end
  return {0, pttl, redis.call('ZRANK', q, me)}
end
local left = redis.call('PTTL', KEYS[1])
if left ~= -2 then return wait(tostring(left)) end
while true do
  local h = redis.call('ZRANGE', q, 0, 0)
  if #h == 0 or h[1] == me then break end
  if redis.call('EXISTS', q .. ':' .. h[1]) == 1 then
    redis.pcall(ARGV[7], KEYS[1] .. ':wake:' .. h[1], '')
    return wait('-1')
  end
  redis.call('ZREM', q, h[1])
end
if redis.call('STRLEN', KEYS[2]) > 256 then
  return redis.error_reply('LFOVERSIZED lease_fence: the generation key holds more than 256 bytes')
end
local maxg = redis.call('GET', KEYS[2])
if maxg and not lt(maxg, ARGV[3]) then
  wait('-1')
  return {2, maxg}
end
redis.call('SET', KEYS[1], me, 'NX', 'PX', ARGV[2])
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[3])
end
if KEYS[3] then
  if ARGV[8] then
    local v = me .. '\n' .. ARGV[8]
    if ARGV[4] ~= '0' then
      redis.call('SET', KEYS[3], v, 'EX', ARGV[4])
    else
      redis.call('SET', KEYS[3], v)
    end
  else
    redis.call('DEL', KEYS[3])
  end
end
redis.call('ZREM', q, me)
redis.call('DEL', q .. ':' .. me)
return {1, ARGV[3]}
