-- Laravel's migration of due jobs, modelled (not Laravel's code): the jobs of a sorted set (the reserved
-- or the delayed one) whose time has come are read, taken out and pushed onto the queue's list, with one
-- notify token each, all in one script.
-- KEYS[1] from (a sorted set), KEYS[2] the queue's list, KEYS[3] its notify list; ARGV[1] now.
-- Returns how many jobs it moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if #due > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #due - 1)
  for _, job in ipairs(due) do
    redis.call('RPUSH', KEYS[2], job)
    redis.call('RPUSH', KEYS[3], 1)
  end
end
return #due
