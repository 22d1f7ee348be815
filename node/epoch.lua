-- KEYS[1] the epoch marker; ARGV[1] the lineage a probe found and the
-- engine judged safe (Info.Lineage: "<master_replid> <run_id> <losses>
-- <db>"); ARGV[2] the evicted-keys count that probe saw, or '' not to
-- check it; ARGV[3] the database the engine's connection selected;
-- ARGV[4...] the commands whose calls count as losses (lossCommands).
-- Writes the marker (that lineage) only if the dataset is still the one
-- judged: the same process, a master, the same replication history, no
-- flush, swap or reload since, and no eviction. Otherwise a loss between
-- the probe and this write would be laundered: every engine would trust
-- the node at once. 1 if written, 0 if the node changed. The database is
-- the engine's word (a script cannot read it): a marker written in one
-- database and found in another (SWAPDB, or a twin deployment's) names
-- the other, and is not trusted.
local function field(section, name)
  return string.match(redis.call('INFO', section), name .. ':([^\r\n]*)')
end
local stats = redis.call('INFO', 'commandstats')
local losses = 0
for i = 4, #ARGV do
  losses = losses + tonumber(string.match(stats, 'cmdstat_' .. ARGV[i] .. ':calls=(%d+)') or '0')
end
local lineage = field('replication', 'master_replid') .. ' ' .. field('server', 'run_id') .. ' ' ..
  string.format('%d', losses) .. ' ' .. ARGV[3]
if lineage ~= ARGV[1] or field('replication', 'role') ~= 'master' or (ARGV[2] ~= '' and field('stats', 'evicted_keys') ~= ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], lineage)
return 1
