-- KEYS[1]: the election's hash, KEYS[2]: its log of accepted heartbeats;
-- ARGV[1]: the leader's fencing token, in decimal, ARGV[2]: its name,
-- ARGV[3]: how many entries the log keeps.
-- Records the heartbeat and returns 1, unless the election's fence (the
-- highest token seen) is above the token: then it counts the refusal and
-- returns 0. A heartbeat only ever raises the fence.
-- Tokens are below 2^53 (the node's clock in microseconds, then +1 each):
-- exact as Lua numbers, as redlease's own script compares them.
local fence = redis.call('HGET', KEYS[1], 'fence') or '0'
if tonumber(ARGV[1]) < tonumber(fence) then
  redis.call('HINCRBY', KEYS[1], 'rejected', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'leader', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'beats', 1)
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return 1
