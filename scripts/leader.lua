-- leader.lua: who leads an election, its term and its value.
-- KEYS[1] lease key, KEYS[2] generation key, KEYS[3] value key
-- No ARGV.  Only reads.
-- Replies: {1, identity, PTTL of the lease key (-1: no expiry), highest
--   generation granted ('' if none), value ('' and 0 if the value key does
--   not hold this identity's value, else the value and 1)} led;
--   {0, generation} nobody leads.  LFOVERSIZED if the lease or generation
--   key holds more than 256 bytes or the value key more than 1057 (an
--   identity, a newline and 1024 bytes of value).
-- Every reply and what it means: scripts/answers.json.
if redis.call('STRLEN', KEYS[2]) > 256 or redis.call('STRLEN', KEYS[1]) > 256
    or redis.call('STRLEN', KEYS[3]) > 1057 then
  return redis.error_reply('LFOVERSIZED lease_fence: a key of the election holds more than it may')
end
local gen = redis.call('GET', KEYS[2]) or ''
local id = redis.call('GET', KEYS[1])
if not id then return {0, gen} end
local v = redis.call('GET', KEYS[3])
if v and #id > 0 and string.sub(v, 1, #id + 1) == id .. '\n' then
  return {1, id, redis.call('PTTL', KEYS[1]), gen, string.sub(v, #id + 2), 1}
end
return {1, id, redis.call('PTTL', KEYS[1]), gen, '', 0}
