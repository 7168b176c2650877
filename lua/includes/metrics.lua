--[[
  includes/metrics.lua -- per-minute throughput of finished jobs
  (PROTOCOL.md §1.5).

  KEYS: <base>metrics:<target> (HASH: count, prevTS, prevCount) and the list
  <that key>:data, newest minute first, at most maxPoints long.
  Each finish adds one to `count`. When the finish falls in a later minute
  than the previous data point (prevTS), one value per elapsed minute is
  pushed: the finishes seen since the last data point for the oldest minute,
  then zeros for the minutes that had none.
]]
--@include "includes/common.lua"

local function recordFinishMetric(metricsKey, maxPoints, now)
  local dataKey = metricsKey .. ":data"
  local total = call("HINCRBY", metricsKey, "count", 1)
  local lastPointAt = tonumber(call("HGET", metricsKey, "prevTS"))
  if not lastPointAt then
    -- First finish ever: it opens the first minute.
    call("HSET", metricsKey, "prevTS", now, "prevCount", 0)
    return
  end
  local minutes = math.floor(now / 60000) - math.floor(lastPointAt / 60000)
  minutes = math.min(minutes, maxPoints)
  if minutes < 1 then
    return
  end
  -- Finishes before this one, minus those already reported.
  local before = total - 1
  local reported = tonumber(call("HGET", metricsKey, "prevCount")) or 0
  local points = {before - reported}
  for i = 2, minutes do
    points[i] = 0
  end
  callInBatches("LPUSH", dataKey, points)
  call("LTRIM", dataKey, 0, maxPoints - 1)
  call("HSET", metricsKey, "prevCount", before, "prevTS", now)
end
