-- release.lua: delete a lease that still holds the identity; wake waiters.
-- KEYS[1] lease key
-- ARGV[1] identity, ARGV[2] 'PUBLISH' or 'SPUBLISH'
-- Replies: 1 released (DEL, and an empty message on <lease key>:released,
--   sent with redis.pcall: a failed publish still releases); 0 not held.
-- The key is compared with GETRANGE, which reads at most one byte more than
-- the identity: a key holding a huge value costs Redis no copy of it.
-- Every reply and what it means: scripts/answers.json.
if #ARGV[1] > 0 and redis.call('GETRANGE', KEYS[1], 0, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then redis.pcall(ARGV[2], KEYS[1] .. ':released', '') end
  return 1
end
return 0
