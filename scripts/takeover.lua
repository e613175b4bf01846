-- takeover.lua: make the owner key this database's, whoever had it.
-- KEYS[1] owner key
-- ARGV[1] claim value
-- Replies: the previous value (its first 256 bytes: no stored value longer
--   is ever returned), or nil when there was none.
-- Every reply and what it means: scripts/answers.json.
local old = nil
if redis.call('EXISTS', KEYS[1]) == 1 then
  old = redis.call('GETRANGE', KEYS[1], 0, 255)
end
redis.call('SET', KEYS[1], ARGV[1])
return old
