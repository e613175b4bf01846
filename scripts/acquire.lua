-- acquire.lua: take a lease, if nobody holds it and the generation is new.
-- KEYS[1] lease key, KEYS[2] generation key, and for a campaign KEYS[3]
--   value key
-- ARGV[1] identity, ARGV[2] ttl_ms, ARGV[3] generation (decimal, no leading
--   zero), ARGV[4] generation key TTL in seconds ('0': none), and for a
--   campaign ARGV[5] its value (none: the value key is deleted); a grant
--   stores identity, a newline and the value there, with the generation
--   key's TTL
-- Replies: {1, generation} acquired (the key set NX PX ttl_ms, the generation
--   stored); {0, PTTL of the lease key} busy; {2, stored generation} stale
--   (ARGV[3] is not above it).  A fair queue (acquire_fair.lua) goes first:
--   while its first live waiter lives, the answer is {0, '-1'} busy even if
--   nobody holds the lease (its dead waiters met on the way are removed).
--   An error reply if ttl_ms is not a positive
--   integer, and LFOVERSIZED if the generation key holds more than 256
--   bytes (no stored value longer is ever returned; nothing is written).
--   Generations compare as decimal strings, never as Lua numbers.
-- Every reply and what it means: scripts/answers.json.
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 or ttl % 1 ~= 0 then
  return redis.error_reply('ERR lease_fence: ttl must be a positive integer')
end
local left = redis.call('PTTL', KEYS[1])
if left ~= -2 then return {0, tostring(left)} end
local q = KEYS[1] .. ':queue'
while true do
  local h = redis.call('ZRANGE', q, 0, 0)
  if #h == 0 then break end
  if redis.call('EXISTS', q .. ':' .. h[1]) == 1 then return {0, '-1'} end
  redis.call('ZREM', q, h[1])
end
if redis.call('STRLEN', KEYS[2]) > 256 then
  return redis.error_reply('LFOVERSIZED lease_fence: the generation key holds more than 256 bytes')
end
local maxg = redis.call('GET', KEYS[2])
if maxg and not lt(maxg, ARGV[3]) then return {2, maxg} end
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[3])
end
if KEYS[3] then
  if ARGV[5] then
    local v = ARGV[1] .. '\n' .. ARGV[5]
    if ARGV[4] ~= '0' then
      redis.call('SET', KEYS[3], v, 'EX', ARGV[4])
    else
      redis.call('SET', KEYS[3], v)
    end
  else
    redis.call('DEL', KEYS[3])
  end
end
return {1, ARGV[3]}
