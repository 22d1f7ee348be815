-- A node actor's batch: several commands, run in order in one call, so
-- that a command costs the node a few Redis calls rather than a script
-- call of its own.
-- KEYS[1] the epoch key; ARGV[1] the epoch marker acquires require (the
-- lineage of the dataset the engine judged safe, then ' debug' when the
-- process may run DEBUG), or '' for none; ARGV[2] the channel of the
-- engine that sends the batch (see grants below), or '' for none. Then,
-- per command, its code in ARGV and its keys and arguments after those of
-- the command before:
--   a  acquire          KEYS lock;        ARGV value, TTL
--   w  acquire, queueing KEYS lock;       ARGV value, TTL, since
--   A  fenced acquire   KEYS lock, fence; ARGV value, TTL, since
--   e  extend           KEYS lock;        ARGV value, TTL
--   d  release          KEYS lock;        ARGV value
--   r  release, announced                 ARGV value
--   l  release, announced, leaving the queue: ARGV value
--   s  release          KEYS lock;        ARGV value, announce, leave,
--                                         then since, value, TTL of a
--                                         successor to queue (value '': none),
--                                         keep, ungranted
--   q  queue            KEYS lock;        ARGV value, since, TTL
--   f  fence            KEYS lock, fence; ARGV value, token
-- The common commands (a, d, r, l) carry no argument they do not use: each
-- costs the node its parsing. TTLs are in milliseconds; since is when a
-- caller began to wait (microseconds), or '' for a caller that does not
-- queue; announce and leave are '1' or ''. Answers one
-- reply per command, in order; a command that fails (a key of the wrong
-- type, say) answers an error and the others still run.
--
-- acquire grants (1) when the lock key was free or already held by this
-- owner, so a retry after a lost reply is idempotent; it refuses when
-- another owner holds it with {0, the key's PTTL, SHA1 of the holder's
-- value}, so that a waiter knows when the key expires and whether one
-- owner holds a quorum; and it answers -1 without granting when the epoch
-- marker, or the replication id it names, is not the one required: the
-- node lost its data (FLUSHALL, a restart, a failover) and must sit out until every lease it may have held has
-- expired. A refused caller that queues joins the resource's queue of
-- waiters (<lock key>:queue, by when it began to wait, then by SHA1, with
-- '~' last so that the queue outlives its waiters for twice the TTL:
-- releases are announced while it exists), which release names the next
-- waiter from; a grant takes it out. The queue only says who goes first:
-- it never refuses anyone. A fenced grant answers {1, counter}: the
-- node's fence counter, at least its clock in microseconds, so that it
-- does not start again at zero after the node lost its data.
--
-- extend resets the TTL (1) only if this owner holds the key; else 0.
--
-- release deletes the key (1) only if this owner holds it; otherwise it
-- leaves it (0). Announced (r, l, s with announce), a deletion is
-- announced on <lock key>:released while the resource has a queue (it was contended lately),
-- as "<SHA1 of the value> <SHA1 of the next waiter, or nothing> <SHA1 of
-- the waiter after it, or nothing>": the value as a refused acquire names
-- the holder, the waiters as the queue orders them, so that the next one
-- goes at once, the one after it stands in for it should it not come, and
-- the others wait to be named. The waiter named leaves the queue: it goes
-- at once, and a refusal puts it back in its place (by when it began to
-- wait), but one that is gone (its engine died) is named once, not by
-- every release while the resource stays contended. Leaving (l, s with
-- leave), the owner leaves the queue too; when it announces that while the key is
-- free (a release may have named it next), it names the next waiter in
-- its stead, with no holder: " <next> <after it>". A successor (the next
-- caller in the owner's engine's line, or a place kept for its next
-- caller) joins the queue first, as its refused acquire would, so that the
-- announcement can name it; ungranted ('1': a place kept for a caller
-- not come yet), it is named but never granted the key. Keeping (s with keep: a failed round's
-- cleanup on a node that refused the round), a key that the owner holds
-- is a release's grant: it stays, and nothing else is done (0) but
-- leaving the queue with leave: keeping and leaving, the owner only
-- leaves the queue, its key untouched, silently (a lease that won
-- elsewhere). An
-- uncontended announced release costs one EXISTS more; a silent one (d)
-- none. PUBLISH goes through pcall,
-- since a server may deny it (an ACL without channels): the release
-- stands.
--
-- Grants. A waiter that joins the queue through a batch of an engine that
-- listens on a channel of its own (ARGV[2]; acquires with since, queue,
-- and successors) leaves its value, TTL and that channel in
-- <lock key>:grants, which nobody but this script reads: values stay
-- secret, announcements carry only their SHA1s. A release that names it
-- next, the key free, also sets the key to its value with its TTL, as
-- its own acquire would, and the announcement ends with " g": the waiter
-- holds the key without a round of its own, from a moment it knows to be
-- earlier (when it began to wait). It does so only when the epoch marker
-- is the one the releasing batch requires (as for an acquire), when the
-- releasing engine grants at all here (ARGV[2]: not while the node may
-- evict lock keys or sits out a quarantine, when it refuses acquires too), and only
-- while the waiter's engine listens on its channel on this node: a waiter
-- whose process died (its connections closed) is only named, and the one
-- after it goes as before, rather than wait for the grant to expire.
--
-- queue puts the caller in the queue of waiters without asking for the
-- lock (1): a waiter that is to let the waiters named before it go first
-- takes its place among them at once.
--
-- fence writes the lease's token back (raising the counter, never
-- lowering it) only while this owner holds the lock key: 1; else 0. A
-- fenced grant and a fence give the counter fenceIdle to live from then:
-- an idle one expires, and starts again at the node's clock.

-- Each call runs this body again, closures included, so it defines only
-- what a command needs more than once: run, epochHolds, join, leaves,
-- step; and runAll, so
-- that a batch costs one pcall rather than one per command.

local epochOK = nil -- whether the marker is the one required, read once

-- fenceIdle: a fence counter lives this long (ms) after the last fenced
-- grant or write-back of its resource (node.FenceIdle).
local fenceIdle = 3600000

-- The marker names a lineage, "<replication id> <run id> <losses>" (Go:
-- Info.Lineage). The running process's replication id (new at every
-- start, promotion and resync) must be the one it names: a marker that
-- came back (a snapshot, a replica's copy, a new process behind a
-- connection that outlived the old one) names another. A flush or swap
-- takes the marker away; only DEBUG RELOAD or LOADAOF bring it back over
-- a dataset that lost keys, so on a process that may run DEBUG (' debug')
-- its losses (calls of lossCommands, as in Go) must match too. INFO
-- commandstats costs the node tens of microseconds: only there.
local function epochHolds()
  if epochOK == nil then
    epochOK = ARGV[1] == ''
    if not epochOK then
      local replid, run, losses, debug = string.match(ARGV[1], '^(%x+) (%x+) (%d+)(.*)$')
      local lineage = replid .. ' ' .. run .. ' ' .. losses
      if redis.call('GET', KEYS[1]) == lineage then
        local info = redis.call('INFO', 'replication')
        epochOK = string.find(info, 'master_replid:' .. replid .. '\r', 1, true) ~= nil
        if epochOK and debug == ' debug' then
          local lossCommands = {'flushall', 'flushdb', 'swapdb', 'debug'}
          local stats, n = redis.call('INFO', 'commandstats'), 0
          for _, c in ipairs(lossCommands) do
            n = n + tonumber(string.match(stats, 'cmdstat_' .. c .. ':calls=(%d+)') or '0')
          end
          epochOK = n == tonumber(losses)
        end
      end
    end
  end
  return epochOK
end

-- join puts member in queue; with value (grantable, see Grants), in the
-- queue's grants too.
local function join(queue, since, member, ttl, value)
  redis.call('ZADD', queue, 'NX', since, member, 'inf', '~')
  if redis.call('PTTL', queue) < 2 * tonumber(ttl) then
    redis.call('PEXPIRE', queue, 2 * tonumber(ttl))
  end
  if value and ARGV[2] ~= '' then
    local grants = queue .. ':grants'
    redis.call('HSET', grants, member, ttl .. ' ' .. ARGV[2] .. ' ' .. value)
    -- Only raised, as the queue's: a shorter waiter's must not drop a
    -- longer one's entry.
    if redis.call('PTTL', grants) < 2 * tonumber(ttl) then
      redis.call('PEXPIRE', grants, 2 * tonumber(ttl))
    end
  end
end

-- leaves takes member out of queue and its grants.
local function leaves(queue, member)
  redis.call('ZREM', queue, member)
  redis.call('HDEL', queue .. ':grants', member)
end

-- run runs the command coded c whose keys start at KEYS[k] and whose
-- arguments at ARGV[a].
local function run(c, k, a)
  local lock, value = KEYS[k], ARGV[a]
  if c == 'a' or c == 'w' or c == 'A' then
    local ttl, since = ARGV[a + 1], ''
    if c ~= 'a' then
      since = ARGV[a + 2]
    end
    if not epochHolds() then
      return -1
    end
    if redis.call('SET', lock, value, 'NX', 'PX', ttl) then
      if since ~= '' then
        leaves(lock .. ':queue', redis.sha1hex(value))
      end
    else
      local holder = redis.call('GET', lock)
      if holder ~= value then
        if since ~= '' then
          -- A fenced waiter needs its round for the counter: no grant.
          join(lock .. ':queue', since, redis.sha1hex(value), ttl, c == 'w' and value)
        end
        return {0, redis.call('PTTL', lock), redis.sha1hex(holder)}
      end
      redis.call('PEXPIRE', lock, ttl)
    end
    if c ~= 'A' then
      return 1
    end
    local now = redis.call('TIME')
    local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
    local counter = tonumber(redis.call('GET', KEYS[k + 1]) or '0')
    if counter < floor then
      counter = floor
    end
    redis.call('PEXPIRE', KEYS[k + 1], fenceIdle)
    return {1, counter}
  elseif c == 'e' then
    if redis.call('GET', lock) == value then
      return redis.call('PEXPIRE', lock, ARGV[a + 1])
    end
    return 0
  elseif c == 'd' or c == 'r' or c == 'l' or c == 's' then
    local announce, leave = c == 'r' or c == 'l', c == 'l'
    if c == 's' then
      announce, leave = ARGV[a + 1] == '1', ARGV[a + 2] == '1'
      if ARGV[a + 6] == '1' and redis.call('GET', lock) == value then
        if leave then
          leaves(lock .. ':queue', redis.sha1hex(value))
        end
        return 0 -- a grant, kept
      end
    end
    -- Only a release that announces, leaves or queues a successor looks
    -- at the queue: a silent one (d, a failed round's cleanup) need not.
    local queue, queued = lock .. ':queue', false
    if announce or leave or c == 's' then
      queued = redis.call('EXISTS', queue) == 1
    end
    local me = nil
    if leave and queued then
      me = redis.sha1hex(value)
      leaves(queue, me)
    end
    if c == 's' and queued and ARGV[a + 4] ~= '' then
      -- An ungranted successor (a kept place) is named, never granted.
      join(queue, ARGV[a + 3], redis.sha1hex(ARGV[a + 4]), ARGV[a + 5], ARGV[a + 7] ~= '1' and ARGV[a + 4])
    end
    local holder = redis.call('GET', lock)
    local deleted = holder == value
    if deleted then
      redis.call('DEL', lock)
    end
    if announce and queued and (deleted or (me and not holder)) then
      local first = redis.call('ZRANGE', queue, 0, 1)
      local next, standby = first[1] or '~', first[2] or '~'
      local granted = ''
      if next == '~' then
        next = ''
      else
        redis.call('ZREM', queue, next)
        -- A grant (see Grants): "ttl channel value".
        local grants = queue .. ':grants'
        local g = redis.call('HGET', grants, next)
        if g then
          redis.call('HDEL', grants, next)
          local s1 = string.find(g, ' ', 1, true)
          local s2 = string.find(g, ' ', s1 + 1, true)
          if ARGV[2] ~= '' and epochHolds() and redis.call('PUBSUB', 'NUMSUB', string.sub(g, s1 + 1, s2 - 1))[2] > 0
              and redis.call('SET', lock, string.sub(g, s2 + 1), 'NX', 'PX', string.sub(g, 1, s1 - 1)) then
            granted = ' g'
          end
        end
      end
      if standby == '~' then
        standby = ''
      end
      if deleted or next ~= '' then
        redis.pcall('PUBLISH', lock .. ':released',
          (deleted and (me or redis.sha1hex(value)) or '') .. ' ' .. next .. ' ' .. standby .. granted)
      end
    end
    if deleted then
      return 1
    end
    return 0
  elseif c == 'q' then
    join(lock .. ':queue', ARGV[a + 1], redis.sha1hex(value), ARGV[a + 2], value)
    return 1
  elseif c == 'f' then
    if redis.call('GET', lock) ~= value then
      return 0
    end
    local fence, token = KEYS[k + 1], ARGV[a + 1]
    if tonumber(redis.call('GET', fence) or '0') < tonumber(token) then
      redis.call('SET', fence, token)
    end
    redis.call('PEXPIRE', fence, fenceIdle)
    return 1
  end
  error('unknown command ' .. c)
end

local out, m = {}, 0
local k, a, n = 2, 3, #ARGV

-- step moves k and a past the command coded c: its keys and arguments.
local function step(c)
  if c == 'A' or c == 'f' then
    k = k + 2
  else
    k = k + 1
  end
  if c == 'd' or c == 'r' or c == 'l' then
    a = a + 2
  elseif c == 'a' or c == 'e' or c == 'f' then
    a = a + 3
  elseif c == 's' then
    a = a + 9
  else
    a = a + 4
  end
end

-- runAll runs the commands from the current one on; an error stops it at
-- the command that raised it.
local function runAll()
  while a <= n do
    local c = ARGV[a]
    m = m + 1
    out[m] = run(c, k, a + 1)
    step(c)
  end
end

while true do
  local ok, r = pcall(runAll)
  if ok then
    break
  end
  if type(r) ~= 'table' or not r.err then
    r = {err = 'ERR redlease: ' .. tostring(r)}
  end
  out[m] = r
  step(ARGV[a])
end
return out
