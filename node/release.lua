-- KEYS[1] lock key; ARGV[1] owner value.
-- Deletes the key (1) only if this owner holds it; otherwise leaves it (0).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
