-- KEYS[1] lock key; ARGV[1] owner value; ARGV[2] TTL in milliseconds.
-- Grants (1) when the key was free or already held by this owner, so a retry
-- after a lost reply is idempotent; refuses (0) when another owner holds it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
