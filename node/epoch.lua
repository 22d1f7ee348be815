-- KEYS[1] epoch key; ARGV[1] run id of the server process judged safe.
-- Writes the epoch marker (that run id: the process that kept its data
-- since) only if this is still that process: a marker restored on a
-- process that restarted since would make every engine trust it (1 if
-- written, 0 if this is another process).
local info = redis.call('INFO', 'server')
if string.match(info, 'run_id:(%x+)') ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
