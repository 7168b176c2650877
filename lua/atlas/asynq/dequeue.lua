-- asynq's dequeue, modelled (not asynq's code): the next pending task moves to the active list, its task
-- hash says it is active, and a lease with its expiry is filed in the lease set. asynq sends the three as
-- one script; a dequeue split into commands can stop between the move and the lease.
-- KEYS[1] pending, KEYS[2] active, KEYS[3] lease; ARGV[1] the task hashes' prefix, ARGV[2] lease expiry.
local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not id then return false end
redis.call('HSET', ARGV[1] .. id, 'state', 'active')
redis.call('ZADD', KEYS[3], ARGV[2], id)
return id
