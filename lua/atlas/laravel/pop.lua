-- Laravel's pop, modelled (not Laravel's code): the queue's next payload is taken off its list, its
-- attempt count goes up by one, and the new payload is filed in the reserved set until its reservation
-- expires; one notify token is taken with it. One script: the job is always in the list or reserved.
-- KEYS[1] the queue's list, KEYS[2] reserved, KEYS[3] notify; ARGV[1] when the reservation expires.
-- Returns {payload, reserved payload}, or false when the queue is empty.
local job = redis.call('LPOP', KEYS[1])
if not job then return false end
local reserved = cjson.decode(job)
reserved['attempts'] = (reserved['attempts'] or 0) + 1
reserved = cjson.encode(reserved)
redis.call('ZADD', KEYS[2], ARGV[1], reserved)
redis.call('LPOP', KEYS[3])
return {job, reserved}
