-- seize.lua: take a lease whoever holds it (lease_fence.take_over()).
-- KEYS[1] lease key, KEYS[2] generation key
-- ARGV[1] identity, ARGV[2] ttl_ms, ARGV[3] generation (decimal, no leading
--   zero), ARGV[4] generation key TTL in seconds ('0': none)
-- Replies: {1, generation, previous identity ('' if nobody held it)} taken
--   (the key set to the identity PX ttl_ms, the generation stored); {2,
--   stored generation} stale (ARGV[3] is not above it: nothing written); an
--   error reply if ttl_ms is not a positive integer, and LFOVERSIZED if the
--   lease or generation key holds more than 256 bytes (nothing written).
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
if redis.call('STRLEN', KEYS[2]) > 256 or redis.call('STRLEN', KEYS[1]) > 256 then
  return redis.error_reply('LFOVERSIZED lease_fence: the lease or generation key holds more than 256 bytes')
end
local maxg = redis.call('GET', KEYS[2])
if maxg and not lt(maxg, ARGV[3]) then return {2, maxg} end
local old = redis.call('GET', KEYS[1]) or ''
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[3])
end
return {1, ARGV[3], old}
