-- KEYS[1] the TTL record (RecordKey); ARGV[1] a lease TTL in milliseconds
-- that the batch after this call uses; ARGV[2] how long the record lives
-- after it (Go: recordSlack TTLs). The record holds the longest TTL used
-- on the node lately: a node that loses its data must sit out that long
-- (see horizon.go). Answers the TTL recorded before, in milliseconds (0:
-- none).
local ttl, life = tonumber(ARGV[1]), tonumber(ARGV[2])
local was = tonumber(redis.call('GET', KEYS[1]) or '0')
if was < ttl then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', life)
elseif redis.call('PTTL', KEYS[1]) < life then
  redis.call('PEXPIRE', KEYS[1], life)
end
return was
