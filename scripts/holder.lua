-- holder.lua: who holds a lease, for how long, and the resource's generation.
-- KEYS[1] lease key, KEYS[2] generation key
-- No ARGV.  Only reads.
-- Replies: {1, identity, PTTL of the lease key (-1: no expiry), highest
--   generation granted (the generation key's value; '' if it has none)}
--   held; {0, the same generation} not held.  LFOVERSIZED if either key
--   holds more than 256 bytes (no stored value longer is ever returned).
-- Every reply and what it means: scripts/answers.json.
if redis.call('STRLEN', KEYS[2]) > 256 or redis.call('STRLEN', KEYS[1]) > 256 then
  return redis.error_reply('LFOVERSIZED lease_fence: the lease or generation key holds more than 256 bytes')
end
local gen = redis.call('GET', KEYS[2]) or ''
local id = redis.call('GET', KEYS[1])
if id then
  return {1, id, redis.call('PTTL', KEYS[1]), gen}
end
return {0, gen}
