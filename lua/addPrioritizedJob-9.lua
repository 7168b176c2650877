--[[
  addPrioritizedJob-9.lua -- add a job with opts.priority > 0 (1 = highest):
  store it and put it in `prioritized`. Protocol: PROTOCOL.md §4.2, §1.7;
  KEYS in BullMQ 3.4.4's order.

  KEYS
     1  marker       ZSET
     2  meta         HASH    paused, concurrency, opts.maxLenEvents
     3  id           STRING  job id counter
     4  prioritized  ZSET    score = priority * 2^32 + (pc mod 2^32)
     5  delayed      ZSET    unused here (BullMQ reads it for deduplication)
     6  completed    ZSET    unused here (BullMQ reads it for flows)
     7  active       LIST    for the global-concurrency check
     8  events       STREAM
     9  pc           STRING  priority counter
  ARGV: see includes/addJob.lua.
  RETURNS the job id (string); duplicates and unsupported options as in
  addStandardJob-9.
  SECTIONS: check arguments; allocate id; store; enqueue; events.
]]
--@include "includes/addJob.lua"

local id, cap, job = addNewJob(KEYS[3], KEYS[2], KEYS[8])
if not id then
  return cap -- the reply for bad arguments or a taken custom id
end
local held = queueHeld(KEYS[2], KEYS[7])
call("ZADD", KEYS[4], priorityScore(KEYS[9], job.priority), id)
signalWork(KEYS[1], held)
call("XADD", KEYS[8], "MAXLEN", "~", cap, "*", "event", "waiting", "jobId", id)
return id
