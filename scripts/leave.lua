-- leave.lua: a fair waiter leaves its queue (its wait ended without a grant).
-- KEYS[1] lease key
-- ARGV[1] identity, ARGV[2] 'PUBLISH' or 'SPUBLISH'
-- Replies: 1 left (its entry in <lease key>:queue and its waiter key
--   deleted; if it was the head, the next live waiter is woken on
--   <lease key>:wake:<its identity>, or, with nobody left waiting and
--   nobody holding the lease, every waiting acquire on <lease key>:released);
--   0 not queued (granted, or removed as dead); nothing else is written.
-- Every reply and what it means: scripts/answers.json.
local q = KEYS[1] .. ':queue'
local rank = redis.call('ZRANK', q, ARGV[1])
redis.call('DEL', q .. ':' .. ARGV[1])
if not rank then return 0 end
redis.call('ZREM', q, ARGV[1])
if rank == 0 then
  local channel = false
  while true do
    local h = redis.call('ZRANGE', q, 0, 0)
    if #h == 0 then break end
    if redis.call('EXISTS', q .. ':' .. h[1]) == 1 then
      channel = KEYS[1] .. ':wake:' .. h[1]
      break
    end
    redis.call('ZREM', q, h[1])
  end
  if not channel and redis.call('EXISTS', KEYS[1]) == 0 then
    channel = KEYS[1] .. ':released'
  end
  if channel then redis.pcall(ARGV[2], channel, '') end
end
return 1
