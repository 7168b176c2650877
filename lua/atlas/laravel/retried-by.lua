-- The fix for Horizon's retry trail kept as a read, a change in the client and a write (emqlab's own; the
-- report's PR moves it into scripts): the parent job's `retried_by` list is read, changed and written in
-- one script. KEYS[1] the parent's record; ARGV[1] the retry's id, ARGV[2] its status, ARGV[3] "append"
-- (add an entry) or "update" (set the status of the entry with that id). Returns the list's length.
local raw = redis.call('HGET', KEYS[1], 'retried_by')
local list = raw and cjson.decode(raw) or {}
if ARGV[3] == 'append' then
  list[#list + 1] = {id = ARGV[1], status = ARGV[2]}
else
  for _, entry in ipairs(list) do
    if entry['id'] == ARGV[1] then entry['status'] = ARGV[2] end
  end
end
redis.call('HSET', KEYS[1], 'retried_by', cjson.encode(list))
return #list
