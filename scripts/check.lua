-- check.lua: is the lease still the identity's, and for how long?
-- KEYS[1] lease key
-- ARGV[1] identity
-- Replies: the key's PTTL if it holds the identity (-1: no expiry); -3 if
--   not (-2, the PTTL of a key that is gone: not held either).
-- Every reply and what it means: scripts/answers.json.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
