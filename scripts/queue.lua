-- queue.lua: the live waiters of a lease's fair queue, first to last.
-- KEYS[1] lease key
-- ARGV[1] how many at most (a positive integer)
-- Replies: only reads.  {identity, PTTL of its waiter key, ...}: a flat
--   array, two elements per live waiter of <lease key>:queue, in order,
--   at most ARGV[1] of them (dead ones are skipped, not removed); {} when
--   nobody waits.  LFOVERSIZED if a member is longer than 64 bytes (no
--   waiter of lease_fence's has such an identity; nothing is returned).
-- Every reply and what it means: scripts/answers.json.
local n = tonumber(ARGV[1])
if not n or n <= 0 or n % 1 ~= 0 then
  return redis.error_reply('ERR lease_fence: the count must be a positive integer')
end
local q = KEYS[1] .. ':queue'
local out = {}
local from = 0
while #out < 2 * n do
  local m = redis.call('ZRANGE', q, from, from + n - 1)
  if #m == 0 then break end
  for _, id in ipairs(m) do
    if #id > 64 then
      return redis.error_reply('LFOVERSIZED lease_fence: a queue member holds more than 64 bytes')
    end
    local left = redis.call('PTTL', q .. ':' .. id)
    if left ~= -2 and #out < 2 * n then
      out[#out + 1] = id
      out[#out + 1] = left
    end
  end
  from = from + n
end
return out
