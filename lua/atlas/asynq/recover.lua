-- The fix for a recovery that reads the expired leases in one round trip and retries them in later ones:
-- the read and the retries in one script (emqlab's own; asynq#717 discusses moving the expired ids in the
-- same step that lists them). Every task whose lease has expired by ARGV[2] and is still active is moved
-- as retry.lua moves one.
-- KEYS[1] lease, KEYS[2] active, KEYS[3] retry; ARGV[1] the task hashes' prefix, ARGV[2] the cutoff,
-- ARGV[3] when to retry. Returns how many tasks it moved.
local moved = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])) do
  if redis.call('LREM', KEYS[2], 0, id) > 0 then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZADD', KEYS[3], ARGV[3], id)
    redis.call('HSET', ARGV[1] .. id, 'state', 'retry')
    redis.call('HINCRBY', ARGV[1] .. id, 'retried', 1)
    moved = moved + 1
  end
end
return moved
