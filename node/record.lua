-- KEYS[1] the TTL record (RecordKey); ARGV[1] a lease TTL in milliseconds
-- that the batch after this call uses. The record holds the longest TTL
-- used on the node lately, and lives at least twice that after each use
-- (recordSlack): a node that loses its data must sit out that long (see
-- horizon.go). Answers the TTL recorded before, in milliseconds (0: none).
local ttl = tonumber(ARGV[1])
local was = tonumber(redis.call('GET', KEYS[1]) or '0')
if was < ttl then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', 2 * ttl)
elseif redis.call('PTTL', KEYS[1]) < 2 * ttl then
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
return was
