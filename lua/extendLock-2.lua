--[[
  extendLock-2.lua -- a worker renews the lock of a job it is processing.
  Protocol: PROTOCOL.md §4.1.

  KEYS
     1  the job's lock  STRING  <base><jobId>:lock
     2  stalled         SET
  ARGV
     1  token (the worker's lock token)
     2  duration (ms): the new TTL
     3  job id
  RETURNS 1 when the lock still held this token (TTL reset, stall mark
  removed), 0 otherwise: a lapsed or foreign lock is never taken over.
  SECTIONS: compare, then set.
]]
--@include "includes/common.lua"

if call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
call("SET", KEYS[1], ARGV[1], "PX", int(ARGV[2]))
call("SREM", KEYS[2], ARGV[3])
return 1
