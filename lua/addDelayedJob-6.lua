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

local job, problem = readNewJob()
if not job then
  return problem
end
local id, jobKey, duplicate = allocateJobId(KEYS[3], job)
local cap = eventCap(KEYS[2])
if duplicate then
  return reportDuplicate(KEYS[6], cap, id)
end
storeNewJob(KEYS[6], jobKey, id, job)
local dueAt = job.timestamp + math.max(job.delay, 0)
call("ZADD", KEYS[4], delayedScore(KEYS[4], dueAt), id)
call("XADD", KEYS[6], "MAXLEN", "~", cap, "*", "event", "delayed", "jobId", id, "delay", dueAt)
signalDelayed(KEYS[1], KEYS[4])
return id
