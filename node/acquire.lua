-- KEYS[1] lock key; KEYS[2] epoch key; ARGV[1] owner value;
-- ARGV[2] TTL in milliseconds; ARGV[3] the epoch marker required (the run
-- id of this server process), or '' for none; ARGV[4] when the caller
-- began to wait (milliseconds), or '' for a caller that does not queue.
-- Grants (1) when the key was free or already held by this owner, so a retry
-- after a lost reply is idempotent; refuses when another owner holds it,
-- with {0, the key's PTTL, SHA1 of the holder's value}, so that a waiter
-- knows when the key expires and whether one owner holds a quorum;
-- answers -1 without granting when the epoch marker is not the one
-- required: the node lost its data (FLUSHALL, a restart) and must sit out
-- until every lease it may have held has expired.
-- A refused caller that queues joins the resource's queue of waiters
-- (<lock key>:queue, by when it began to wait, then by SHA1, with '~' last
-- so that the queue outlives its waiters for twice the TTL: releases are
-- announced while it exists), which release.lua names the next waiter
-- from; a grant takes it out. The queue only says who goes first: it
-- never refuses anyone.
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then
  return -1
end
local queue = KEYS[1] .. ':queue'
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[4] ~= '' then
    redis.call('ZREM', queue, redis.sha1hex(ARGV[1]))
  end
  return 1
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if ARGV[4] ~= '' then
  redis.call('ZADD', queue, 'NX', ARGV[4], redis.sha1hex(ARGV[1]), 'inf', '~')
  if redis.call('PTTL', queue) < 2 * tonumber(ARGV[2]) then
    redis.call('PEXPIRE', queue, 2 * tonumber(ARGV[2]))
  end
end
return {0, redis.call('PTTL', KEYS[1]), redis.sha1hex(holder)}
