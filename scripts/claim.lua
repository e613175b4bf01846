local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[2])
  return {2, ARGV[2]}
end
if cur == ARGV[1] or string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  return {1, cur}
end
return {0, cur}
