-- Sidekiq's take of one due job from a sorted set (the scheduled or the retry set), modelled (not
-- Sidekiq's code): the first payload whose time has come is read and removed in one script, so two
-- pollers never both take it. KEYS[1] the sorted set; ARGV[1] now. Returns the payload, or false.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
if not due[1] then return false end
redis.call('ZREM', KEYS[1], due[1])
return due[1]
