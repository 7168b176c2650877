--[[
  moveToFinished-14.lua -- a worker is done with an active job: file it as
  completed or failed (or put it back for another attempt), release its lock,
  and optionally hand the worker its next job in the same call.
  Protocol: PROTOCOL.md §1 (BullMQ moveToFinished-14, ARGV layout v5.33+).

  KEYS
     1  wait            LIST    fetch-next source (taken from the right end)
     2  active          LIST    the job must be here
     3  prioritized     ZSET    fetch-next fallback; retry target for jobs with a priority
     4  events          STREAM  events are appended here
     5  stalled         SET     stall candidates; the job is removed from it
     6  limiter         STRING  rate-limit counter (PX = window)
     7  delayed         ZSET    fetch-next promotes from it; retry-with-backoff target
     8  paused          LIST    unused (kept for arity, as in BullMQ v6)
     9  meta            HASH    paused, concurrency, max, duration, opts.maxLenEvents
    10  pc              STRING  priority counter
    11  completed|failed ZSET   the target set (the one named by ARGV[5])
    12  job hash        HASH    <base><jobId>
    13  metrics:<target> HASH   metrics meta; its list is "<KEYS[13]>:data"
    14  marker          ZSET    worker wake-up marker

  ARGV
     1  job id
     2  timestamp (ms): finishedOn, the score in the target set, metrics time
     3  property name: "returnvalue" or "failedReason"
     4  property value (returnvalue: JSON text; failedReason: plain text)
     5  target: "completed" or "failed"
     6  fetch next? only the string "1" means yes
     7  keys prefix "emq:{q}:" (trailing colon)
     8  msgpack map of options:
          token          lock token; "0" = the caller holds no lock (skip lock checks)
          keepJobs       {count, age (s), limit}; absent = keep every job
          attempts       max attempts; absent or 0 = never retry
          backoff        ms to wait before a retry (emqlab's own; 0 = retry at once)
          maxMetricsSize "" or absent = metrics off; n = keep n one-minute points
          lockDuration   ms, lock TTL of the fetched next job (default 30000)
          limiter        {max, duration (ms)} for the fetched next job
          name           worker name, stored as `pb` on the fetched next job
     9  optional msgpack flat array {field, value, ...} written into the job
        hash (stacktrace, ...); "" or absent = none

  RETURNS
     0                      done, nothing fetched
     {fields, id, 0, 0}     done, and the next job was fetched (flat HGETALL)
     {0, 0, ttl, 0}         done; fetch refused: rate limited for ttl ms
     {0, 0, 0, 0}           done; fetch refused: queue paused or at global concurrency
     {0, 0, 0, dueAt}       done; nothing to fetch, next delayed job due at dueAt (ms)
    -1  the job hash does not exist            (JobNotExist)
    -2  the job's lock does not exist          (JobLockNotExist)
    -3  the job is not in `active`             (JobNotInState)
    -4  completing with pending children       (JobPendingChildren)
    -6  the lock holds another token           (JobLockMismatch)
    -9  completing with failed children        (JobHasFailedChildren)
    A negative code means NOTHING was written: every check runs before the
    first write. (In BullMQ, -3 comes after the lock was already deleted.)
    Malformed options are a Lua error reply, also before any write.

  SECTIONS -- this script is the lesson of emqlab:
    1. READ    every check and every value the writes depend on.
    2. DECIDE  completed, failed, or retried; computed from what READ saw.
    3. WRITE   the writes, in protocol order, WITHOUT re-checking anything.
  The writes are correct only because nothing can run between READ and
  WRITE: Redis runs a script atomically. Each write step below names the
  window that opens right after it when the same commands are sent one at a
  time by a client (a "split" finish) and other clients run in between.

  INTENDED DIFFERENCE FROM BULLMQ -- retries are decided here. In BullMQ the
  client decides whether a failure is retried and calls retryJob or
  moveToDelayed instead of moveToFinished. Here a "failed" finish whose
  attempt number (atm + 1) is below opts.attempts, on a job without a
  deferred failure (`defa`), is RETRIED: back to `wait` (LPUSH, like a new
  job; `prioritized` when the job has a priority) with event "waiting"
  (prev "active") as BullMQ's retryJob emits, or, when opts.backoff > 0, to
  `delayed` at now + backoff with event "delayed" as BullMQ's moveToDelayed
  emits. A retried job keeps ARGV[3]/ARGV[4] (its last failedReason) but gets
  no finishedOn, no metrics and no keepJobs trimming. Pass attempts = 0 for a
  failure that must not be retried (BullMQ's UnrecoverableError).
  Other differences: no parent/child (flow) or deduplication bookkeeping
  (emqlab's add scripts refuse such jobs); missing keepJobs / maxMetricsSize /
  attempts mean defaults instead of Lua errors half-way through.
]]
--@include "includes/common.lua"
--@include "includes/fetchNextJob.lua"
--@include "includes/retention.lua"
--@include "includes/metrics.lua"

local jobKey = KEYS[12]
local lockKey = jobKey .. ":lock"
local jobId = ARGV[1]
local now = tonumber(ARGV[2])
local prop = ARGV[3]
local value = ARGV[4]
local target = ARGV[5]
local prefix = ARGV[7]

if #ARGV < 8 or now == nil or prop == "" then
  return redis.error_reply("ERR emqlab: moveToFinished needs ARGV id, timestamp (ms), property, value, "
    .. "target, fetchNext, prefix, opts")
end
if target ~= "completed" and target ~= "failed" then
  return redis.error_reply("ERR emqlab: moveToFinished target must be 'completed' or 'failed'")
end
now = int(now)

--==========================================================================--
--  1. READ -- every check happens here, before the first write.             --
--     Nothing in this section changes the database.                         --
--==========================================================================--

-- R1: the job exists.
if call("EXISTS", jobKey) == 0 then
  return -1
end

-- R2: a job may only complete once its children are done (flows).
if target == "completed" then
  if call("SCARD", jobKey .. ":dependencies") ~= 0 then
    return -4
  end
  if call("ZCARD", jobKey .. ":unsuccessful") ~= 0 then
    return -9
  end
end

-- R3: the options (decoded and checked now, so no bad value can stop the
-- script half-way through its writes).
local opts = cmsgpack.unpack(ARGV[8])
if type(opts) ~= "table" then
  return redis.error_reply("ERR emqlab: ARGV[8] must be a msgpack map")
end
local token = tokenOf(opts)
if token == nil then
  return redis.error_reply("ERR emqlab: opts.token is required (\"0\" = no lock)")
end
local keep, keepProblem = readKeepJobs(opts["keepJobs"])
if not keep then
  return redis.error_reply("ERR emqlab: " .. keepProblem)
end
local attempts = tonumber(opts["attempts"] or 0)
local backoff = tonumber(opts["backoff"] or 0)
if attempts == nil or backoff == nil then
  return redis.error_reply("ERR emqlab: opts.attempts and opts.backoff must be numbers")
end
local maxPoints = nil
local rawMetrics = opts["maxMetricsSize"]
if rawMetrics ~= nil and rawMetrics ~= "" then
  maxPoints = tonumber(rawMetrics)
  if maxPoints == nil or maxPoints < 1 then
    return redis.error_reply("ERR emqlab: opts.maxMetricsSize must be \"\" or a positive number")
  end
  maxPoints = int(maxPoints)
end
local fields = nil
if ARGV[9] and #ARGV[9] > 0 then
  fields = cmsgpack.unpack(ARGV[9])
  if type(fields) ~= "table" or #fields % 2 ~= 0 then
    return redis.error_reply("ERR emqlab: ARGV[9] must be a msgpack flat array field, value, ...")
  end
  if #fields == 0 then
    fields = nil
  end
end

-- R4: the caller still owns the job (unless it said it holds no lock).
local checksLock = token ~= "0"
if checksLock then
  local holder = call("GET", lockKey)
  if not holder then
    return -2
  end
  if holder ~= token then
    return -6
  end
end

-- R5: the job is in `active`. LPOS only looks; BullMQ learns this from the
-- count of its LREM, i.e. after it has already written.
if not call("LPOS", KEYS[2], jobId) then
  return -3
end

-- R6: what the decision and the writes need to know. W3 writes the ARGV[9]
-- fields before the attempt is counted (as in BullMQ), so a field given
-- there (atm, defa, priority) is the value that counts, not the stored one.
local job = call("HMGET", jobKey, "atm", "defa", "priority")
if fields then
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == "atm" then
      job[1] = fields[i + 1]
    elseif name == "defa" then
      job[2] = fields[i + 1]
    elseif name == "priority" then
      job[3] = fields[i + 1]
    end
  end
end
local attemptsMade = tonumber(job[1]) or 0
local deferredFailure = job[2]
local priority = tonumber(job[3]) or 0
local eventCapField = call("HGET", KEYS[9], "opts.maxLenEvents")
-- Whether the queue is held (paused, or at global concurrency) once this job
-- has left `active`: a retry to `wait` wakes workers only when it is not.
local heldAfterLeaving = queueHeld(KEYS[9], KEYS[2], -1)

--==========================================================================--
--  2. DECIDE -- where the job goes. Pure computation on what READ saw:     --
--     no Redis calls.                                                       --
--==========================================================================--

local attemptNumber = attemptsMade + 1
local outcome
if target == "completed" then
  outcome = "completed"
elseif attemptNumber < attempts and not deferredFailure then
  if backoff > 0 then
    outcome = "retry-delayed"
  else
    outcome = "retry-wait"
  end
else
  outcome = "failed"
end
local isFinal = outcome == "completed" or outcome == "failed"
local retryAt = now + int(backoff)

--==========================================================================--
--  3. WRITE -- in protocol order (lock, stalled, active, target). These     --
--     steps trust section 1 and re-check NOTHING: inside one script that    --
--     is correct because no other client can run in between. Sent one      --
--     command at a time instead, each step opens the window named below.    --
--==========================================================================--

-- W1: release the lock.
if checksLock then
  call("DEL", lockKey)
  -- WINDOW after W1 (the one the lesson opens): the job is still in `active`
  -- and still marked in `stalled`, but it has no lock. A stalled sweep now
  -- recovers it: LREM from `active`, RPUSH to `wait`, stc+1. This finish
  -- does not notice and files it as completed below, so the job ends in
  -- BOTH `completed` and `wait`: another worker will run it again.

  -- W2: it is no longer a stall candidate.
  call("SREM", KEYS[5], jobId)
  -- WINDOW after W2: active, unlocked, unmarked. A sweep's mark phase marks
  -- it again; if this finish is delayed past the next sweep, that sweep
  -- recovers it exactly as in the W1 window.
end

-- W3: fields the worker asked to store (stacktrace, ...).
if fields then
  call("HMSET", jobKey, unpack(fields))
  -- WINDOW after W3: readers see the new fields on a job that still looks
  -- active (and that a sweep may still hand to another worker).
end

-- W4: leave `active`. The count LREM returns is deliberately ignored: R5
-- proved the job is there and nothing ran since, so it is always 1 here.
-- A split finish that ignores it too (as this one would) cannot tell that a
-- sweep already moved the job away.
call("LREM", KEYS[2], -1, jobId)
-- WINDOW after W4: the job is in no list or set at all; observers counting
-- jobs per state see it vanish until the next step files it.

-- W5: one more attempt made.
call("HINCRBY", jobKey, "atm", 1)
-- WINDOW after W5: attemptsMade already counts an attempt whose outcome is
-- not recorded anywhere yet.

-- W6: file the job according to the decision.
if isFinal then
  if keep.count == 0 then
    -- keepJobs.count 0: the job is not kept at all.
    deleteJobKeys(jobKey)
    -- WINDOW after the delete: a late duplicate finish of this job gets -1.
  else
    call("ZADD", KEYS[11], now, jobId)
    -- WINDOW after ZADD: the job reads as completed/failed but has no
    -- returnvalue/failedReason/finishedOn yet.
    call("HSET", jobKey, prop, value, "finishedOn", now)
    if outcome == "failed" then
      call("HDEL", jobKey, "defa")
    end
    -- W7: keepJobs trimming of the target set.
    applyRetention(KEYS[11], prefix, now, keep)
    -- WINDOW around W7: another finish trimming the same set between this
    -- finish's ZADD and HSET can delete this job's hash; the HSET then
    -- recreates a fragment of a hash for a job that no set holds.
  end
elseif outcome == "retry-delayed" then
  call("HSET", jobKey, prop, value, "delay", int(backoff))
  call("ZADD", KEYS[7], delayedScore(KEYS[7], retryAt), jobId)
  signalDelayed(KEYS[14], KEYS[7])
  -- WINDOW after the ZADD: a fetch promotes the job once due, before the
  -- "delayed" event below is written.
else
  call("HSET", jobKey, prop, value)
  if priority > 0 then
    call("ZADD", KEYS[3], priorityScore(KEYS[10], priority), jobId)
  else
    call("LPUSH", KEYS[1], jobId)
  end
  signalWork(KEYS[14], heldAfterLeaving)
  -- WINDOW after the push: another worker can take the retry (and even
  -- finish it) before this finish writes its "waiting" event.
end

-- W8: events. Trim first so the stream never loses this script's entries.
if not eventCapField then
  call("HSET", KEYS[9], "opts.maxLenEvents", 10000)
end
call("XTRIM", KEYS[4], "MAXLEN", "~", eventCapField or 10000)
if isFinal then
  call("XADD", KEYS[4], "*", "event", target, "jobId", jobId, prop, value, "prev", "active")
  if outcome == "failed" and attemptNumber >= attempts then
    call("XADD", KEYS[4], "*", "event", "retries-exhausted", "jobId", jobId,
      "attemptsMade", attemptNumber)
  end
elseif outcome == "retry-delayed" then
  call("XADD", KEYS[4], "*", "event", "delayed", "jobId", jobId, "delay", retryAt)
else
  call("XADD", KEYS[4], "*", "event", "waiting", "jobId", jobId, "prev", "active")
end
-- WINDOW before W8: the new state is visible while the event that
-- announces it is not yet in the stream.

-- W9: metrics (final outcomes only).
if isFinal and maxPoints then
  recordFinishMetric(KEYS[13], maxPoints, now)
  -- WINDOW inside W9: two split finishes in a new minute both read the old
  -- prevTS and both push data points; the series counts a minute twice.
end

-- W10: hand the worker its next job (same code as moveToActive-11).
if ARGV[6] == "1" then
  local q = {
    wait = KEYS[1], active = KEYS[2], prioritized = KEYS[3], events = KEYS[4],
    limiter = KEYS[6], delayed = KEYS[7], meta = KEYS[9], pc = KEYS[10], marker = KEYS[14],
  }
  local nextJob = fetchNextJob(q, prefix, now, opts)
  -- WINDOW inside W10: split, two workers can both pass the rate-limit GET
  -- before either INCRs, and run more jobs than the limit allows.
  if nextJob then
    return nextJob
  end
end

-- W11: nothing left anywhere -> "drained".
if call("LLEN", KEYS[1]) == 0 and call("LLEN", KEYS[2]) == 0 and call("ZCARD", KEYS[3]) == 0 then
  call("XADD", KEYS[4], "*", "event", "drained")
end
return 0
