-- check.lua: is the lease still the identity's, and for how long?
-- KEYS[1] lease key
-- ARGV[1] identity
-- Replies: the key's PTTL if it holds the identity (-1: no expiry); -3 if
--   not (-2, the PTTL of a key that is gone: not held either).
-- The key is compared with GETRANGE, which reads at most one byte more than
-- the identity: a key holding a huge value costs Redis no copy of it.
-- Every reply and what it means: scripts/answers.json.
if #ARGV[1] > 0 and redis.call('GETRANGE', KEYS[1], 0, #ARGV[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
