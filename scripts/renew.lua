-- renew.lua: extend a lease that still holds the identity; never recreate it.
-- KEYS[1] lease key
-- ARGV[1] identity, ARGV[2] ttl_ms
-- Replies: 1 renewed (PEXPIRE ttl_ms); 0 lost (the key no longer holds the
--   identity); an error reply if ttl_ms is not a positive integer.
-- The key is compared with GETRANGE, which reads at most one byte more than
-- the identity: a key holding a huge value costs Redis no copy of it.
-- Every reply and what it means: scripts/answers.json.
local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 or ttl % 1 ~= 0 then
  return redis.error_reply('ERR lease_fence: ttl must be a positive integer')
end
if #ARGV[1] == 0 or redis.call('GETRANGE', KEYS[1], 0, #ARGV[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
