-- KEYS[1] lock key; ARGV[1] owner value; ARGV[2] TTL in milliseconds.
-- Resets the TTL (1) only if this owner holds the key; otherwise 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
