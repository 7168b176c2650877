-- asynq's forwarder, modelled (not asynq's code): every task of the retry set that is due goes back to the
-- pending list, and its hash says so.
-- KEYS[1] retry, KEYS[2] pending; ARGV[1] the task hashes' prefix, ARGV[2] now. Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
for _, id in ipairs(due) do
  redis.call('LPUSH', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HSET', ARGV[1] .. id, 'state', 'pending')
end
return #due
