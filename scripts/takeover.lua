-- takeover.lua: make the owner key this database's, whoever had it.
-- KEYS[1] owner key
-- ARGV[1] claim value
-- Replies: the previous value, or nil when there was none.
-- Every reply and what it means: scripts/answers.json.
local old = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
return old
