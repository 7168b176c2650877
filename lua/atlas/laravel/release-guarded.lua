-- The fix for a release that files a payload whether or not it was still reserved (emqlab's own): the job
-- is filed in the delayed set only if this release took it out of the reserved set.
-- KEYS[1] delayed, KEYS[2] reserved; ARGV[1] the reserved payload, ARGV[2] when it is due again.
-- 1 = released; 0 = the job had already left the reserved set (a migration queued it again, which is
-- what a release wants): nothing written.
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
