-- KEYS[1] lock key; ARGV[1] owner value; ARGV[2] the channel to announce
-- the release on, or '' for none.
-- Deletes the key (1) only if this owner holds it; otherwise leaves it (0).
-- A deletion is announced with the SHA1 of the value (what a refused
-- acquire names the holder by), so waiters wake at once; pcall, since a
-- server may deny PUBLISH (an ACL without channels): the release stands.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.pcall('PUBLISH', ARGV[2], redis.sha1hex(ARGV[1]))
  end
  return 1
end
return 0
