-- KEYS[1] lock key; KEYS[2] fence key; ARGV[1] owner value; ARGV[2] token.
-- Writes the lease's fencing token back (raising the counter, never
-- lowering it) only while this owner holds the lock key here: 1; else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local token = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
