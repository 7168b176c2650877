-- asynq's enqueue of a task with a caller-chosen id, modelled (not asynq's code): a task hash that already
-- exists under that id means a conflict, and nothing is written; otherwise the hash is written and the id
-- pushed onto the pending list. KEYS[1] the task hash, KEYS[2] pending; ARGV[1] task id, ARGV[2] its
-- message, ARGV[3] now. 1 = enqueued, 0 = the id was taken (a conflict).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'msg', ARGV[2], 'state', 'pending', 'pending_since', ARGV[3])
redis.call('LPUSH', KEYS[2], ARGV[1])
return 1
