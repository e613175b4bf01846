if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then redis.pcall(ARGV[2], KEYS[1] .. ':released', '') end
  return 1
end
return 0
