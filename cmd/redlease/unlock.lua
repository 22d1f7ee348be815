-- KEYS[1]: a lock key; ARGV[1]: the owner value an operator saw there.
-- Deletes the key if it still holds ARGV[1], and returns the value it
-- held (nil: none), so that the caller tells deleted, gone and taken by
-- another owner apart. Only the lock key: the queue of waiters, the
-- grants and the fence counter stay.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return value
