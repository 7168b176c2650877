-- asynq's "mark as complete" of a task kept for a retention period, modelled (not asynq's code): only a
-- task still in the active list is moved; it leaves the active list and the lease set and is filed in the
-- completed set, its hash saying so.
-- KEYS[1] active, KEYS[2] lease, KEYS[3] completed; ARGV[1] the task hashes' prefix, ARGV[2] task id,
-- ARGV[3] when the retention ends. -3 = the task was not active (nothing written; emqlab's code for
-- "not in active"), 0 = completed.
if redis.call('LREM', KEYS[1], 0, ARGV[2]) == 0 then return -3 end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
redis.call('HSET', ARGV[1] .. ARGV[2], 'state', 'completed')
return 0
