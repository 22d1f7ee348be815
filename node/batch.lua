-- A node actor's batch: several commands, run in order in one call, so
-- that a command costs the node a few Redis calls rather than a script
-- call of its own.
-- KEYS[1] the epoch key; ARGV[1] the epoch marker acquires require (the
-- lineage of the dataset the engine judged safe, then ' debug' when the
-- process may run DEBUG), or '' for none; ARGV[2] the channel of the
-- engine that sends the batch (see grants below), or '' for none; ARGV[3]
-- '1' on a Redis Cluster's master, whose announcements go out on the
-- sharded channel of the lock key's slot (SPUBLISH), else ''. Then,
-- per command, its code in ARGV and its keys and arguments after those of
-- the command before, as the protocol table in Go states them (node's
-- scriptCmds; TestScriptAgreesWithTable checks these lines and arity
-- below against it):
--
--   a  acquire -> 1 | {0, pttl, holder, meta} | -1
--        KEYS lock
--        ARGV value, ttl
--   w  acquire, queueing -> 1 | {0, pttl, holder, meta} | -1
--        KEYS lock, queue, grants
--        ARGV value, ttl, since
--   A  fenced acquire -> {1, counter} | {0, pttl, holder, meta} | -1
--        KEYS lock, queue, grants, fence
--        ARGV value, ttl, since
--   e  extend -> 1 | 0 | -2
--        KEYS lock
--        ARGV value, ttl
--   d  release -> 1 | 0 | -2
--        KEYS lock
--        ARGV value
--   r  release, announced -> 1 | 0 | -2
--        KEYS lock, queue, grants
--        ARGV value
--   l  release, announced, leaving the queue -> 1 | 0 | -2
--        KEYS lock, queue, grants
--        ARGV value
--   H  hand-off: release, announced, queueing a successor -> 1 | 0 | -2
--        KEYS lock, queue, grants
--        ARGV value, leave, successor since, successor, successor ttl, ungranted
--   C  cleanup keeping a grant or its place -> 1 | 0 | -2
--        KEYS lock, queue, grants
--        ARGV value, ttl, since, announce, keep
--   g  leave, keeping a grant -> 0
--        KEYS lock, queue, grants
--        ARGV value
--   q  queue -> 1
--        KEYS lock, queue, grants
--        ARGV value, ttl, since
--   f  fence -> 1 | 0
--        KEYS lock, fence
--        ARGV value, token
--   c  check -> {1, pttl} | {0, pttl, holder, meta} | -2 | -1
--        KEYS lock
--        ARGV value
--   h  heal -> 1 | 0 | -1
--        KEYS lock
--        ARGV value, ttl
--
-- Keys: lock, the lock key; queue, its queue of waiters (<lock>:queue);
-- grants, the queue's grants (<lock>:queue:grants); fence, its fence
-- counter. Every key a command touches is among its KEYS, so that a batch
-- runs where Redis Cluster puts its keys. The commands that never touch
-- the queue (a, e, d, f, c, h) do not carry its keys, nor do the common
-- ones (a, d, r, l) an argument they do not use: each costs the node its
-- parsing.
-- TTLs are in milliseconds; since is when a caller began to wait
-- (microseconds), or '' for a caller that does not queue; announce,
-- leave, keep and ungranted are '1' or ''. Answers one reply per command,
-- in order; a command that fails (a key of the wrong type, say) answers
-- an error and the others still run. An unknown code fails the call: the
-- commands after it could not be told apart.
--
-- acquire grants (1) when the lock key was free or already held by this
-- owner, so a retry after a lost reply is idempotent; it refuses when
-- another owner holds it with {0, the key's PTTL, SHA1 of the holder's
-- value, the holder's meta}, so that a waiter knows when the key expires,
-- whether one owner holds a quorum, and who (taken, below); and it answers -1 without granting when the epoch
-- marker, or the replication id it names, is not the one required: the
-- node lost its data (FLUSHALL, a restart, a failover) and must sit out
-- until every lease it may have held has expired. A refused caller that
-- queues joins the resource's queue of waiters (queue, by when it began
-- to wait, then by SHA1, with '~' last so that the queue outlives its waiters for twice the TTL:
-- releases are announced while it exists), which release names the next
-- waiter from; a grant takes it out. The queue only says who goes first:
-- it never refuses anyone. A fenced grant answers {1, counter}: the
-- node's fence counter, at least its clock in microseconds, so that it
-- does not start again at zero after the node lost its data.
--
-- extend resets the TTL (1) only if this owner holds the key; else 0
-- when another owner holds it, -2 when nobody does: a key the lease may
-- heal. extend never sets a key: were it to set an absent one, a lease
-- whose keys had all lapsed (nodes paused past the TTL, a clock step)
-- while another owner took and released the resource would be made
-- again, unaware, rather than be told that it is lost.
--
-- heal sets the key to the owner's value with the TTL given (the time
-- the lease's keys have left) only where no key is (1; else 0), and
-- only where the epoch marker holds, as an acquire: else -1. A lease
-- sends it after an extension round that a quorum of nodes holding its
-- own key won, to the nodes that answered -2: while those keys live no
-- other owner can win a quorum, so a key set elsewhere can only make
-- the lease more robust (see the lease package's doc, Healing).
--
-- release deletes the key (1) only if this owner holds it; otherwise it
-- leaves another owner's (0), or finds none (-2). Announced (r, l, s with announce), a deletion is
-- announced on <lock>:released (releasedSuffix) while the resource has a
-- queue (it was contended lately), as "<SHA1 of the value> <SHA1 of the next waiter, or nothing> <SHA1 of
-- the waiter after it, or nothing>": the value as a refused acquire names
-- the holder, the waiters as the queue orders them, so that the next one
-- goes at once, the one after it stands in for it should it not come, and
-- the others wait to be named. The waiter named leaves the queue: it goes
-- at once, and a refusal puts it back in its place (by when it began to
-- wait), but one that is gone (its engine died) is named once, not by
-- every release while the resource stays contended. Leaving (l, s with
-- leave), the owner leaves the queue too; when it announces that while
-- the key is free (a release may have named it next), it names the next waiter in
-- its stead, with no holder: " <next> <after it>". A successor (the next
-- caller in the owner's engine's line, or a place kept for its next
-- caller) joins the queue first, as its refused acquire would, so that the
-- announcement can name it; ungranted ('1': a place kept for a caller
-- not come yet), it is named but never granted the key. Keeping (s with
-- keep: a failed round's cleanup on a node that refused the round), a key
-- that the owner holds is a release's grant: it stays, and nothing else
-- is done (0) but leaving the queue with leave: keeping and leaving, the
-- owner only leaves the queue, its key untouched, silently (a lease that
-- won elsewhere). An uncontended announced release costs one EXISTS more;
-- a silent one (d) none. On a Redis Cluster the announcement goes out
-- with SPUBLISH (ARGV[3]), to the subscribers of the shard that serves
-- the lock key's slot, the channel's too: PUBLISH would reach every node
-- of the cluster. It goes through pcall, since a server may
-- deny it (an ACL without channels): the release stands.
--
-- Grants. A waiter that joins the queue through a batch of an engine that
-- listens on a channel of its own (ARGV[2]; acquires with since, queue,
-- and successors) leaves its value, TTL and that channel in grants,
-- which nobody but this script reads: values stay
-- secret, announcements carry only their SHA1s. A release that names it
-- next, the key free, also sets the key to its value with its TTL, as
-- its own acquire would, and the announcement ends with " g"
-- (grantedSuffix): the waiter
-- holds the key without a round of its own, from a moment it knows to be
-- earlier (when it began to wait). It does so only when the epoch marker
-- is the one the releasing batch requires (as for an acquire), when the
-- releasing engine grants at all here (ARGV[2]: not while the node may
-- evict lock keys or sits out a quarantine, when it refuses acquires
-- too), and only while the waiter's engine listens on its channel on this node: a waiter
-- whose process died (its connections closed) is only named, and the one
-- after it goes as before, rather than wait for the grant to expire.
--
-- queue puts the caller in the queue of waiters without asking for the
-- lock (1): a waiter that is to let the waiters named before it go first
-- takes its place among them at once.
--
-- An owner value may carry a meta, after its first metaSep (Go: MetaSep):
-- <random part>|<meta>, the random part URL-safe base64, which never
-- holds the separator. A refusal answers the holder's meta, never its
-- value: values stay secret.
--
-- check reads, and changes nothing: {1, the key's PTTL} when this owner
-- holds the key; a refusal's answer (taken) when another owner does; 0
-- when nobody does; and -1, as an acquire, when the epoch marker is not
-- the one required (the node may have lost the key: its word does not
-- count).
--
-- fence writes the lease's token back (raising the counter, never
-- lowering it) only while this owner holds the lock key: 1; else 0. A
-- fenced grant and a fence give the counter fenceIdle to live from then:
-- an idle one expires, and starts again at the node's clock.

-- Each call runs this body again, closures included, so it defines only
-- what a command needs more than once: run, epochHolds, arity (below, generated), join,
-- leaves, taken;
-- and runAll, so that a batch costs one pcall rather than one per
-- command.

local epochOK = nil -- whether the marker is the one required, read once

-- BEGIN the protocol table, generated from scriptCmds (protocol.go) by
-- `go test ./node -run TestScriptAgreesWithTable -update`: do not edit.
local epochKey, epochRequired, channel, sharded = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local K_lock = 0
local A_value = 0
local A_ttl = 1
local K_queue = 1
local K_grants = 2
local A_since = 2
local K_A_fence = 3
local K_f_fence = 1
local A_leave = 1
local A_successorSince = 2
local A_successor = 3
local A_successorTtl = 4
local A_ungranted = 5
local A_announce = 3
local A_keep = 4
local A_token = 1
local function arity(c)
  if c == 'a' then return 1, 3
  elseif c == 'w' then return 3, 4
  elseif c == 'A' then return 4, 4
  elseif c == 'e' then return 1, 3
  elseif c == 'd' then return 1, 2
  elseif c == 'r' then return 3, 2
  elseif c == 'l' then return 3, 2
  elseif c == 'H' then return 3, 7
  elseif c == 'C' then return 3, 6
  elseif c == 'g' then return 3, 2
  elseif c == 'q' then return 3, 4
  elseif c == 'f' then return 2, 3
  elseif c == 'c' then return 1, 2
  elseif c == 'h' then return 1, 3
  end
end
-- END the protocol table

-- The release channel's suffix and the end of an announcement that
-- granted (Go: ReleasedSuffix, GrantedSuffix).
local releasedSuffix, grantedSuffix = ':released', ' g'

-- What ends the random part of an owner value that carries a meta (Go:
-- MetaSep).
local metaSep = '|'

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
    epochOK = epochRequired == ''
    if not epochOK then
      local replid, run, losses, db, debug = string.match(epochRequired, '^(%x+) (%x+) (%d+) (%d+)(.*)$')
      local lineage = replid .. ' ' .. run .. ' ' .. losses .. ' ' .. db
      if redis.call('GET', epochKey) == lineage then
        local info = redis.call('INFO', 'replication')
        epochOK = string.find(info, 'master_replid:' .. replid .. '\r', 1, true) ~= nil and
          string.find(info, 'role:master\r', 1, true) ~= nil
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
local function join(queue, grants, since, member, ttl, value)
  redis.call('ZADD', queue, 'NX', since, member, 'inf', '~')
  if redis.call('PTTL', queue) < 2 * tonumber(ttl) then
    redis.call('PEXPIRE', queue, 2 * tonumber(ttl))
  end
  if value and channel ~= '' then
    redis.call('HSET', grants, member, ttl .. ' ' .. channel .. ' ' .. value)
    -- Only raised, as the queue's: a shorter waiter's must not drop a
    -- longer one's entry.
    if redis.call('PTTL', grants) < 2 * tonumber(ttl) then
      redis.call('PEXPIRE', grants, 2 * tonumber(ttl))
    end
  end
end

-- leaves takes member out of queue and grants.
local function leaves(queue, grants, member)
  redis.call('ZREM', queue, member)
  redis.call('HDEL', grants, member)
end

-- taken is the answer about lock, which holder, another owner's value,
-- holds: {0, its PTTL, its SHA1, its meta}.
local function taken(lock, holder)
  local i = string.find(holder, metaSep, 1, true)
  return {0, redis.call('PTTL', lock), redis.sha1hex(holder), i and string.sub(holder, i + 1) or ''}
end

-- run runs the command coded c whose keys start at KEYS[k] and whose
-- arguments at ARGV[a]; the keys are in the order of its header line.
local function run(c, k, a)
  local lock, value = KEYS[k + K_lock], ARGV[a + A_value]
  if c == 'a' or c == 'w' or c == 'A' then
    local ttl, since, queue, grants = ARGV[a + A_ttl], '', nil, nil
    if c ~= 'a' then
      since, queue, grants = ARGV[a + A_since], KEYS[k + K_queue], KEYS[k + K_grants]
    end
    if not epochHolds() then
      return -1
    end
    if redis.call('SET', lock, value, 'NX', 'PX', ttl) then
      if since ~= '' then
        leaves(queue, grants, redis.sha1hex(value))
      end
    else
      local holder = redis.call('GET', lock)
      if holder ~= value then
        if since ~= '' then
          -- A fenced waiter needs its round for the counter: no grant.
          join(queue, grants, since, redis.sha1hex(value), ttl, c == 'w' and value)
        end
        return taken(lock, holder)
      end
      redis.call('PEXPIRE', lock, ttl)
    end
    if c ~= 'A' then
      return 1
    end
    local now = redis.call('TIME')
    local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
    local fence = KEYS[k + K_A_fence]
    local counter = tonumber(redis.call('GET', fence) or '0')
    if counter < floor then
      counter = floor
    end
    redis.call('PEXPIRE', fence, fenceIdle)
    return {1, counter}
  elseif c == 'e' then
    local holder = redis.call('GET', lock)
    if holder == value then
      return redis.call('PEXPIRE', lock, ARGV[a + A_ttl])
    elseif holder then
      return 0
    end
    return -2
  elseif c == 'h' then
    if not epochHolds() then
      return -1
    end
    if redis.call('SET', lock, value, 'NX', 'PX', ARGV[a + A_ttl]) then
      return 1
    end
    return 0
  elseif c == 'd' or c == 'r' or c == 'l' or c == 'H' or c == 'C' then
    local announce, leave = c == 'r' or c == 'l' or c == 'H', c == 'l'
    -- A successor to queue before the next waiter is named: a hand-off's
    -- (granted when named, unless ungranted), or a cleanup's own place.
    local successor, since, ttl, grantable = '', '', nil, true
    -- Only a release that announces, leaves or queues a successor looks
    -- at the queue: a silent one (d, a failed round's cleanup) need not,
    -- and does not carry its keys.
    local queue, grants, queued = nil, nil, false
    if c ~= 'd' then
      queue, grants = KEYS[k + K_queue], KEYS[k + K_grants]
    end
    if c == 'H' then
      leave = ARGV[a + A_leave] == '1'
      successor, since, ttl = ARGV[a + A_successor], ARGV[a + A_successorSince], ARGV[a + A_successorTtl]
      grantable = ARGV[a + A_ungranted] ~= '1'
    elseif c == 'C' then
      announce = ARGV[a + A_announce] == '1'
      if ARGV[a + A_keep] == '1' and redis.call('GET', lock) == value then
        return 0 -- a grant, kept
      end
      since, ttl = ARGV[a + A_since], ARGV[a + A_ttl]
      if since ~= '' then
        successor = value
      end
    end
    if announce or leave or c == 'C' then
      queued = redis.call('EXISTS', queue) == 1
    end
    local me = nil
    if leave and queued then
      me = redis.sha1hex(value)
      leaves(queue, grants, me)
    end
    if queued and successor ~= '' then
      -- An ungranted successor (a kept place) is named, never granted.
      join(queue, grants, since, redis.sha1hex(successor), ttl, grantable and successor)
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
        local g = redis.call('HGET', grants, next)
        if g then
          redis.call('HDEL', grants, next)
          local s1 = string.find(g, ' ', 1, true)
          local s2 = string.find(g, ' ', s1 + 1, true)
          -- Whether its engine listens goes through pcall, as PUBLISH: a
          -- node that denies PUBSUB (an ACL without pub/sub) answers an
          -- error table, with no count; it grants nobody, and the
          -- release stands.
          if channel ~= '' and epochHolds()
              and (redis.pcall('PUBSUB', 'NUMSUB', string.sub(g, s1 + 1, s2 - 1))[2] or 0) > 0
              and redis.call('SET', lock, string.sub(g, s2 + 1), 'NX', 'PX', string.sub(g, 1, s1 - 1)) then
            granted = grantedSuffix
          end
        end
      end
      if standby == '~' then
        standby = ''
      end
      if deleted or next ~= '' then
        redis.pcall(sharded == '1' and 'SPUBLISH' or 'PUBLISH', lock .. releasedSuffix,
          (deleted and (me or redis.sha1hex(value)) or '') .. ' ' .. next .. ' ' .. standby .. granted)
      end
    end
    if deleted then
      return 1
    elseif not holder then
      return -2
    end
    return 0
  elseif c == 'g' then
    leaves(KEYS[k + K_queue], KEYS[k + K_grants], redis.sha1hex(value))
    return 0
  elseif c == 'q' then
    join(KEYS[k + K_queue], KEYS[k + K_grants], ARGV[a + A_since], redis.sha1hex(value), ARGV[a + A_ttl], value)
    return 1
  elseif c == 'f' then
    if redis.call('GET', lock) ~= value then
      return 0
    end
    local fence, token = KEYS[k + K_f_fence], ARGV[a + A_token]
    if tonumber(redis.call('GET', fence) or '0') < tonumber(token) then
      redis.call('SET', fence, token)
    end
    redis.call('PEXPIRE', fence, fenceIdle)
    return 1
  elseif c == 'c' then
    if not epochHolds() then
      return -1
    end
    local holder = redis.call('GET', lock)
    if not holder then
      return -2
    elseif holder ~= value then
      return taken(lock, holder)
    end
    return {1, redis.call('PTTL', lock)}
  end
  error('unknown command ' .. c)
end

local out, m = {}, 0
local k, a, n = 2, 4, #ARGV

-- runAll runs the commands from the current one on; an error stops it at
-- the command that raised it. An unknown code stops it too, before k and
-- a move: nothing after it can be read.
local function runAll()
  while a <= n do
    local c = ARGV[a]
    m = m + 1
    out[m] = run(c, k, a + 1)
    local nk, na = arity(c)
    k, a = k + nk, a + na
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
  local nk, na = arity(ARGV[a])
  if not nk then
    return r
  end
  out[m] = r
  k, a = k + nk, a + na
end
return out
