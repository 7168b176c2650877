-- asynq's retry of one task, modelled (not asynq's code): only a task still in the active list is moved;
-- it leaves the active list and the lease set, is filed in the retry set, and its hash counts the retry.
-- KEYS[1] active, KEYS[2] lease, KEYS[3] retry; ARGV[1] the task hashes' prefix, ARGV[2] task id,
-- ARGV[3] when to retry. -3 = the task was not active (nothing written; emqlab's code for "not in
-- active"), 0 = moved.
if redis.call('LREM', KEYS[1], 0, ARGV[2]) == 0 then return -3 end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
redis.call('HSET', ARGV[1] .. ARGV[2], 'state', 'retry')
redis.call('HINCRBY', ARGV[1] .. ARGV[2], 'retried', 1)
return 0
