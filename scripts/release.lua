-- release.lua: delete a lease that still holds the identity; wake waiters.
-- KEYS[1] lease key
-- ARGV[1] identity, ARGV[2] 'PUBLISH' or 'SPUBLISH'
-- Replies: 1 released (DEL, and an empty message, sent with redis.pcall: a
--   failed publish still releases); 0 not held.  The message goes to the
--   first live waiter of the lease's fair queue (acquire_fair.lua), on
--   <lease key>:wake:<its identity>, its dead waiters met on the way
--   removed; with no queue, to every waiting acquire, on
--   <lease key>:released.
-- The key is compared with GETRANGE, which reads at most one byte more than
-- the identity: a key holding a huge value costs Redis no copy of it.
-- Every reply and what it means: scripts/answers.json.
if #ARGV[1] > 0 and redis.call('GETRANGE', KEYS[1], 0, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then
    local q = KEYS[1] .. ':queue'
    local channel = KEYS[1] .. ':released'
    while true do
      local h = redis.call('ZRANGE', q, 0, 0)
      if #h == 0 then break end
      if redis.call('EXISTS', q .. ':' .. h[1]) == 1 then
        channel = KEYS[1] .. ':wake:' .. h[1]
        break
      end
      redis.call('ZREM', q, h[1])
    end
    redis.pcall(ARGV[2], channel, '')
  end
  return 1
end
return 0
