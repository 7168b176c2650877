--[[
  addDelayedJob-6.lua -- add a job that may run only after opts.delay ms.
  Protocol: PROTOCOL.md §4.2, §4.3 (delayed score); KEYS in BullMQ 3.4.4's
  order.

  KEYS
     1  marker     ZSET    member "1" scored with the earliest due time
     2  meta       HASH    opts.maxLenEvents
     3  id         STRING  job id counter
     4  delayed    ZSET    score = due ms * 4096 + sequence
     5  completed  ZSET    unused here (BullMQ reads it for flows)
     6  events     STREAM
  ARGV: see includes/addJob.lua; the due time is timestamp + opts.delay.
  RETURNS the job id (string); duplicates and unsupported options as in
  addStandardJob-9.
  SECTIONS: check arguments; allocate id; store; schedule; events.
]]
--@include "includes/addJob.lua"

local id, cap, job = addNewJob(KEYS[3], KEYS[2], KEYS[6])
if not id then
  return cap -- the reply for bad arguments or a taken custom id
end
local dueAt = job.timestamp + math.max(job.delay, 0)
call("ZADD", KEYS[4], delayedScore(KEYS[4], dueAt), id)
call("XADD", KEYS[6], "MAXLEN", "~", cap, "*", "event", "delayed", "jobId", id, "delay", dueAt)
signalDelayed(KEYS[1], KEYS[4])
return id
