-- KEYS[1] lock key; ARGV[1] owner value; ARGV[2] '1' to announce the
-- release (on <lock key>:released), '' not to; ARGV[3] '1' when the owner
-- also leaves the resource's queue of waiters (see acquire.lua), '' not;
-- optionally ARGV[4] when the owner's successor (the next caller in its
-- engine's line) began to wait (milliseconds), ARGV[5] the SHA1 of its
-- value, ARGV[6] the TTL in milliseconds: the successor joins the queue
-- first, as its refused acquire would, so the announcement can name it.
-- Deletes the key (1) only if this owner holds it; otherwise leaves it (0).
-- A deletion is announced while the resource has a queue (it was
-- contended lately), as "<SHA1 of the value> <SHA1 of the next waiter, or
-- nothing> <SHA1 of the waiter after it, or nothing>": the value as a
-- refused acquire names the holder, the waiters as the queue orders them,
-- so that the next one goes at once, the one after it stands in for it
-- should it not come, and the others wait to be named. The waiter named
-- leaves the queue: it goes at once, and
-- a refusal puts it back in its place (by when it began to wait), but one
-- that is gone (its engine died) is named once, not by every release
-- while the resource stays contended. A waiter that leaves the queue
-- (ARGV[3]) and announces it (ARGV[2]) while the key is free (a release
-- may have named it next) names the next waiter in its stead, with no
-- holder: " <next> <after it>". An uncontended release costs one
-- EXISTS more. pcall,
-- since a server may deny PUBLISH (an ACL without channels): the release
-- stands.
local queue = KEYS[1] .. ':queue'
local queued = redis.call('EXISTS', queue) == 1
local me = nil
if ARGV[3] == '1' and queued then
  me = redis.sha1hex(ARGV[1])
  redis.call('ZREM', queue, me)
end
if ARGV[4] and queued then
  redis.call('ZADD', queue, 'NX', ARGV[4], ARGV[5])
  if redis.call('PTTL', queue) < 2 * tonumber(ARGV[6]) then
    redis.call('PEXPIRE', queue, 2 * tonumber(ARGV[6]))
  end
end
local holder = redis.call('GET', KEYS[1])
local deleted = holder == ARGV[1]
if deleted then
  redis.call('DEL', KEYS[1])
end
if ARGV[2] == '1' and queued and (deleted or (me and not holder)) then
  local first = redis.call('ZRANGE', queue, 0, 1)
  local next, standby = first[1] or '~', first[2] or '~'
  if next == '~' then
    next = ''
  else
    redis.call('ZREM', queue, next)
  end
  if standby == '~' then
    standby = ''
  end
  if deleted or next ~= '' then
    redis.pcall('PUBLISH', KEYS[1] .. ':released',
      (deleted and (me or redis.sha1hex(ARGV[1])) or '') .. ' ' .. next .. ' ' .. standby)
  end
end
if deleted then
  return 1
end
return 0
