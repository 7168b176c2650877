--[[
  releaseLock-1.lua -- a worker gives up the lock of a job it holds.
  Protocol: PROTOCOL.md §4.1.

  KEYS
     1  the job's lock  STRING  <base><jobId>:lock
  ARGV
     1  token
  RETURNS 1 when the lock held this token and was deleted, else 0.
  SECTIONS: compare, then delete.
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
