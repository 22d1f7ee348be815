-- KEYS[1] lock key; ARGV[1] owner value; ARGV[2] when the caller began to
-- wait (milliseconds); ARGV[3] TTL in milliseconds.
-- Puts the caller in the resource's queue of waiters (see acquire.lua)
-- without asking for the lock: a waiter that is to let the waiters named
-- before it go first takes its place among them at once (1).
local queue = KEYS[1] .. ':queue'
redis.call('ZADD', queue, 'NX', ARGV[2], redis.sha1hex(ARGV[1]), 'inf', '~')
if redis.call('PTTL', queue) < 2 * tonumber(ARGV[3]) then
  redis.call('PEXPIRE', queue, 2 * tonumber(ARGV[3]))
end
return 1
