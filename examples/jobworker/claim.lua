-- KEYS[1]: the job's hash; ARGV[1]: the holder's fencing token, in decimal.
-- Raises the job's fence to the token and returns how many results the
-- job has (0: not done yet); returns -1, raising nothing, when the fence
-- is above the token already: a later holder claimed the job.
-- Tokens are below 2^53 (the node's clock in microseconds, then +1 each):
-- exact as Lua numbers, as redlease's own script compares them.
local fence = redis.call('HGET', KEYS[1], 'fence') or '0'
if tonumber(ARGV[1]) < tonumber(fence) then
  redis.call('HINCRBY', KEYS[1], 'rejected', 1)
  return -1
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'writes') or '0')
