--[[
  moveStalledJobsToWait-8.lua -- the recovery sweep: jobs whose worker
  stopped renewing the lock go back to `wait`. Protocol: PROTOCOL.md §3
  (the lazy v5.53 "-8" shape, the one EchoMQ names).

  KEYS
     1  stalled        SET     stall candidates marked by the previous sweep
     2  wait           LIST    recovered jobs are RPUSHed (taken next)
     3  active         LIST
     4  stalled-check  STRING  throttle: one sweep per interval, queue-wide
     5  meta           HASH    paused, concurrency, opts.maxLenEvents
     6  paused         LIST    unused (kept for arity, as in BullMQ v6)
     7  marker         ZSET
     8  events         STREAM

  ARGV
     1  maxStalledCount: how many stalls a job may have before it is marked
        for failure
     2  keys prefix "emq:{q}:" (trailing colon)
     3  timestamp (ms)
     4  max check time (ms): the throttle's TTL, normally the stalled interval

  RETURNS the list of recovered job ids; {} when another sweep ran within the
  interval (stalled-check still exists) or nothing was stalled.

  SECTIONS
    THROTTLE  stalled-check exists -> return {}; else SET it PX ARGV[4].
    CHECK     every id marked by the previous sweep whose lock is gone is
              recovered: LREM from `active` and, only if that removed it,
              stc+1, RPUSH to `wait`, marker, events "waiting" (prev active)
              and "stalled".
    MARK      every id now in `active` becomes a candidate for the next sweep.
              A live worker clears its mark by renewing the lock (extendLock)
              or by finishing (moveToFinished).

  PAST THE LIMIT (stc > maxStalledCount) the job is still moved to `wait`, with
  a deferred failure: HSET defa "job stalled more than allowable limit". The
  worker that fetches it next fails it through moveToFinished (BullMQ
  v5.53.2+ behaviour). Chosen over the old eager variant (ZADD failed here)
  because the sweep then never duplicates the finish's failure bookkeeping
  (keepJobs, metrics, events, attempts): there is one place that fails a job.
  It is also the -8 shape EchoMQ names. emqlab has no job schedulers, so no
  job is exempt from the limit (BullMQ exempts repeatable jobs).
]]
--@include "includes/common.lua"

local stalledKey, waitKey, activeKey, checkKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local metaKey, markerKey, eventsKey = KEYS[5], KEYS[7], KEYS[8]
local maxStalled = tonumber(ARGV[1])
local prefix = ARGV[2]
local now = tonumber(ARGV[3])
local checkEvery = tonumber(ARGV[4])
if maxStalled == nil or now == nil or checkEvery == nil or checkEvery < 1 then
  return redis.error_reply("ERR emqlab: sweep needs ARGV maxStalledCount, prefix, timestamp (ms), "
    .. "max check time (ms, >= 1)")
end

-- THROTTLE
if call("EXISTS", checkKey) == 1 then
  return {}
end
call("SET", checkKey, int(now), "PX", int(checkEvery))
trimEvents(metaKey, eventsKey)

-- CHECK
local recovered = {}
local candidates = call("SMEMBERS", stalledKey)
if #candidates > 0 then
  call("DEL", stalledKey)
  for _, id in ipairs(candidates) do
    local jobKey = prefix .. id
    -- Lock present: the worker renewed it in time; the mark below re-arms it.
    if call("EXISTS", jobKey .. ":lock") == 0 and call("LREM", activeKey, 1, id) > 0 then
      local stalls = call("HINCRBY", jobKey, "stc", 1)
      if stalls > maxStalled then
        call("HSET", jobKey, "defa", "job stalled more than allowable limit")
      end
      call("RPUSH", waitKey, id)
      signalWork(markerKey, queueHeld(metaKey, activeKey))
      call("XADD", eventsKey, "*", "event", "waiting", "jobId", id, "prev", "active")
      call("XADD", eventsKey, "*", "event", "stalled", "jobId", id)
      recovered[#recovered + 1] = id
    end
  end
end

-- MARK
local active = call("LRANGE", activeKey, 0, -1)
callInBatches("SADD", stalledKey, active)

return recovered
