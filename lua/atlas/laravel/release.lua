-- Laravel's release of a reserved job back to the delayed set, modelled (not Laravel's code): the job's
-- reserved payload is taken out of the reserved set and filed in the delayed set. The filing does not
-- depend on the removal: a payload that had already left the reserved set is filed all the same.
-- KEYS[1] delayed, KEYS[2] reserved; ARGV[1] the reserved payload, ARGV[2] when it is due again.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
