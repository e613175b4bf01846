-- claim.lua: claim a key_prefix for one database, unless another has.
-- KEYS[1] owner key (<key_prefix>owner)
-- ARGV[1] owner id (<system identifier>:<database OID>), ARGV[2] claim value
--   (the owner id, ':' and the database name)
-- Replies: {2, value} claimed now; {1, value} ours already; {0, value}
--   another database's (value is the key's); LFOVERSIZED if the owner key
--   holds more than 256 bytes (nothing is written).
-- Every reply and what it means: scripts/answers.json.
if redis.call('STRLEN', KEYS[1]) > 256 then
  return redis.error_reply('LFOVERSIZED lease_fence: the owner key holds more than 256 bytes')
end
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[2])
  return {2, ARGV[2]}
end
if cur == ARGV[1] or string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  return {1, cur}
end
return {0, cur}
