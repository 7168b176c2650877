--[[
  includes/fetchNextJob.lua -- hand the next job to a worker (PROTOCOL.md §1.7).

  This is the ONLY copy of the fetch logic. Two scripts run it:
    * moveToActive-11   -- a worker asks for work;
    * moveToFinished-14 -- a worker finishes a job and asks for the next one in
                           the same call (ARGV[6] == "1").
  BullMQ once kept two copies of this code and they drifted apart (issue
  #1094); one include means the two paths cannot disagree.

  fetchNextJob(q, prefix, now, opts)
    q       table of key names: wait, active, prioritized, events, limiter,
            delayed, meta, pc, marker
    prefix  the queue's keys prefix "emq:{q}:" (a job hash is prefix .. id)
    now     timestamp in ms (number)
    opts    decoded options: token (string; "0" = take no lock),
            lockDuration (ms), limiter {max, duration (ms)}, name (worker)
  returns one of
    {job fields as a flat list, jobId, 0, 0}   a job moved to active and locked
    {0, 0, ttl, 0}                             rate limited for ttl more ms
    {0, 0, 0, 0}                               paused or global concurrency reached
    {0, 0, 0, dueAt}                           nothing to take; next delayed job due at dueAt (ms)
    nil                                        nothing to take and nothing delayed
]]
--@include "includes/common.lua"

-- Step 1: what the queue's meta hash says. Returns held (paused, or global
-- concurrency reached), the global rate-limit max and its window in ms.
local function readQueueSettings(q)
  local meta = call("HMGET", q.meta, "paused", "concurrency", "max", "duration")
  local held = false
  if meta[1] then
    held = true
  elseif meta[2] then
    held = call("LLEN", q.active) >= tonumber(meta[2])
  end
  return held, tonumber(meta[3]), tonumber(meta[4])
end

-- Step 2: delayed jobs whose time has come go to `wait` (or `prioritized`
-- when they carry a priority), at most 1000 per call.
local function promoteDueJobs(q, prefix, now, held)
  local lastScore = (int(now) + 1) * DELAY_SHIFT - 1
  local due = call("ZRANGEBYSCORE", q.delayed, 0, lastScore, "LIMIT", 0, 1000)
  if #due == 0 then
    return
  end
  callInBatches("ZREM", q.delayed, due)
  for _, id in ipairs(due) do
    local jobKey = prefix .. id
    local priority = tonumber(call("HGET", jobKey, "priority")) or 0
    if priority > 0 then
      call("ZADD", q.prioritized, priorityScore(q.pc, priority), id)
    else
      call("LPUSH", q.wait, id)
    end
    call("HSET", jobKey, "delay", 0)
    call("XADD", q.events, "*", "event", "waiting", "jobId", id, "prev", "delayed")
  end
  signalWork(q.marker, held)
end

-- Step 3: ms until the rate-limit window ends when its budget is spent, else 0.
-- A counter whose TTL reads 0 is about to vanish; delete it now.
local function rateLimitTtl(limiterKey, maxJobs)
  if not maxJobs then
    return 0
  end
  local used = tonumber(call("GET", limiterKey)) or 0
  if used < maxJobs then
    return 0
  end
  local ttl = call("PTTL", limiterKey)
  if ttl > 0 then
    return ttl
  end
  if ttl == 0 then
    call("DEL", limiterKey)
  end
  return 0
end

-- Step 6: the job `id` has just been put in `active`: count it against the
-- rate limit, lock it, record who/when, and reply with its fields.
local function startJob(q, prefix, id, now, opts, maxJobs, windowMs)
  local jobKey = prefix .. id
  -- A job carrying a deferred failure ("defa") will be failed at once by the
  -- worker; it does not spend rate-limit budget.
  if maxJobs and call("HEXISTS", jobKey, "defa") == 0 then
    -- No window known (a limiter max without any duration): count without
    -- expiring; BullMQ raises a Lua error here (lenient-finish-options).
    if call("INCR", q.limiter) == 1 and windowMs then
      call("PEXPIRE", q.limiter, int(math.abs(windowMs)))
    end
  end
  local token = tokenOf(opts)
  if token ~= "0" then
    call("SET", jobKey .. ":lock", token, "PX", lockMsOf(opts))
  end
  call("XADD", q.events, "*", "event", "active", "jobId", id, "prev", "waiting")
  if opts["name"] then
    call("HSET", jobKey, "processedOn", now, "pb", tostring(opts["name"]))
  else
    call("HSET", jobKey, "processedOn", now)
  end
  call("HINCRBY", jobKey, "ats", 1)
  -- Keep the other workers polling: there may be more work behind this job.
  call("ZADD", q.marker, 0, "0")
  return {call("HGETALL", jobKey), id, 0, 0}
end

local function fetchNextJob(q, prefix, now, opts)
  local held, globalMax, globalWindow = readQueueSettings(q)
  promoteDueJobs(q, prefix, now, held)

  local limiter = opts["limiter"]
  if type(limiter) ~= "table" then
    limiter = {}
  end
  local maxJobs = globalMax or tonumber(limiter["max"])
  local ttl = rateLimitTtl(q.limiter, maxJobs)
  if ttl > 0 then
    return {0, 0, ttl, 0}
  end
  if held then
    return {0, 0, 0, 0}
  end
  local windowMs = tonumber(limiter["duration"]) or globalWindow

  -- Step 5: FIFO from the right end of `wait`, else the best of `prioritized`.
  local id = call("RPOPLPUSH", q.wait, q.active)
  if not id then
    local best = call("ZPOPMIN", q.prioritized)
    if best[1] then
      id = best[1]
      call("LPUSH", q.active, id)
    else
      -- Nothing prioritized is left: restart the priority counter.
      call("DEL", q.pc)
    end
  end
  if id then
    return startJob(q, prefix, id, now, opts, maxJobs, windowMs)
  end

  -- Step 7: nothing to take now; say when the next delayed job is due.
  local due = earliestDue(q.delayed)
  if due then
    return {0, 0, 0, due}
  end
  return nil
end
