-- The fix for a dispatch that pushes a job and writes its Horizon record in separate round trips
-- (emqlab's own): the record (status pending, in the pending-jobs index) and the push in one script, so
-- no worker can finish the job before its record says pending.
-- KEYS[1] the queue's list, KEYS[2] notify, KEYS[3] the job's record, KEYS[4] the pending-jobs index;
-- ARGV[1] the payload, ARGV[2] the job id, ARGV[3] now.
redis.call('HSET', KEYS[3], 'id', ARGV[2], 'status', 'pending', 'payload', ARGV[1], 'created_at', ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], 1)
return 1
