-- KEYS[1] lock key; KEYS[2] epoch key; KEYS[3] fence key (no TTL);
-- ARGV[1] owner value; ARGV[2] TTL in milliseconds; ARGV[3] the epoch
-- marker required, or '' for none; ARGV[4] when the caller began to wait,
-- or '' (see acquire.lua).
-- As acquire.lua, and a grant also answers this node's fence counter:
-- {1, counter}, where the counter is at least the node's clock in
-- microseconds, so it does not start again at zero after the node lost
-- its data. Refusals answer {0, PTTL, SHA1 of the holder's value} (taken,
-- as acquire.lua) or -1 (epoch marker missing or not the one required).
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then
  return -1
end
local queue = KEYS[1] .. ':queue'
local granted = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not granted then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then
    if ARGV[4] ~= '' then
      redis.call('ZADD', queue, 'NX', ARGV[4], redis.sha1hex(ARGV[1]), 'inf', '~')
      if redis.call('PTTL', queue) < 2 * tonumber(ARGV[2]) then
        redis.call('PEXPIRE', queue, 2 * tonumber(ARGV[2]))
      end
    end
    return {0, redis.call('PTTL', KEYS[1]), redis.sha1hex(holder)}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif ARGV[4] ~= '' then
  redis.call('ZREM', queue, redis.sha1hex(ARGV[1]))
end
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local counter = tonumber(redis.call('GET', KEYS[3]) or '0')
if counter < floor then
  counter = floor
end
return {1, counter}
