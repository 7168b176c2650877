--[[
  addStandardJob-9.lua -- add a job that can run now: store it and put it in
  `wait`. Protocol: PROTOCOL.md §4.2.

  KEYS
     1  wait       LIST    new jobs are LPUSHed (RPUSH with opts.lifo)
     2  paused     LIST    unused (kept for arity, as in BullMQ v6)
     3  meta       HASH    paused, concurrency, opts.maxLenEvents
     4  id         STRING  job id counter
     5  completed  ZSET    unused here (BullMQ reads it for flows)
     6  delayed    ZSET    unused here (BullMQ reads it for deduplication)
     7  active     LIST    for the global-concurrency check
     8  events     STREAM
     9  marker     ZSET
  ARGV: see includes/addJob.lua (1 msgpack args array, 2 data JSON,
        3 msgpack options).
  RETURNS the job id (string). A custom id that already exists: the job is
  untouched, event "duplicated", and its id is returned. Flows,
  deduplication and schedulers: error reply, nothing written.
  SECTIONS: check arguments; allocate id; store; enqueue; events.
]]
--@include "includes/addJob.lua"

local id, cap, job = addNewJob(KEYS[4], KEYS[3], KEYS[8])
if not id then
  return cap -- the reply for bad arguments or a taken custom id
end
local held = queueHeld(KEYS[3], KEYS[7])
if job.opts["lifo"] then
  call("RPUSH", KEYS[1], id)
else
  call("LPUSH", KEYS[1], id)
end
signalWork(KEYS[9], held)
call("XADD", KEYS[8], "MAXLEN", "~", cap, "*", "event", "waiting", "jobId", id)
return id
