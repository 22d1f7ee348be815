-- KEYS[1]: the job's hash, KEYS[2]: the set of done jobs; ARGV[1]: the
-- holder's fencing token, in decimal, ARGV[2]: the result, ARGV[3]: the
-- worker's name, ARGV[4]: the job's id.
-- Stores the result and returns 1, unless the job's fence is above the
-- token: then it counts the refusal and returns 0. A write only ever
-- raises the fence.
-- Tokens are below 2^53 (the node's clock in microseconds, then +1 each):
-- exact as Lua numbers, as redlease's own script compares them.
local fence = redis.call('HGET', KEYS[1], 'fence') or '0'
if tonumber(ARGV[1]) < tonumber(fence) then
  redis.call('HINCRBY', KEYS[1], 'rejected', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'token', ARGV[1], 'result', ARGV[2], 'worker', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'writes', 1)
redis.call('SADD', KEYS[2], ARGV[4])
return 1
