--[[
  includes/retention.lua -- keepJobs: how many finished jobs a queue keeps
  (PROTOCOL.md §1.4 step 11).

  keepJobs = {count, age (seconds), limit}
    count  -1 or absent: keep every job; 0: do not keep this job at all (the
           caller deletes it instead of filing it); n > 0: keep the newest n.
    age    jobs finished at or before now - age*1000 are removed, at most
           `limit` per call (default 1000).
  A removed job loses its hash and sibling keys, not only its set entry.
]]
--@include "includes/common.lua"

-- Remove the finished jobs of `setKey` scored at or before `cutoff` (ms).
local function dropFinishedOlderThan(setKey, prefix, cutoff, limit)
  local expired = call("ZREVRANGEBYSCORE", setKey, cutoff, "-inf", "LIMIT", 0, limit)
  for _, id in ipairs(expired) do
    deleteJobKeys(prefix .. id)
  end
  callInBatches("ZREM", setKey, expired)
end

-- Keep only the `count` newest jobs of `setKey`.
local function dropFinishedBeyond(setKey, prefix, count)
  local surplus = call("ZREVRANGE", setKey, count, -1)
  if #surplus == 0 then
    return
  end
  for _, id in ipairs(surplus) do
    deleteJobKeys(prefix .. id)
  end
  call("ZREMRANGEBYRANK", setKey, 0, -(count + 1))
end

-- Apply keepJobs to `setKey` after a job was filed there at `now`.
local function applyRetention(setKey, prefix, now, keep)
  if keep.age then
    dropFinishedOlderThan(setKey, prefix, int(now - keep.age * 1000), keep.limit)
  end
  if keep.count > 0 then
    dropFinishedBeyond(setKey, prefix, keep.count)
  end
end

-- Decode opts.keepJobs into {count, age, limit}; nil or a non-table means
-- "keep everything" (BullMQ's script fails on a missing keepJobs instead).
-- Returns nil plus a message for values it cannot use.
local function readKeepJobs(raw)
  local keep = {count = -1, age = nil, limit = 1000}
  if raw == nil then
    return keep
  end
  if type(raw) ~= "table" then
    return nil, "opts.keepJobs must be a map {count, age, limit}"
  end
  if raw["count"] ~= nil then
    keep.count = tonumber(raw["count"])
    if keep.count == nil then
      return nil, "opts.keepJobs.count must be a number"
    end
    keep.count = int(keep.count)
  end
  if keep.count < 0 then
    keep.count = -1
  end
  if raw["age"] ~= nil then
    keep.age = tonumber(raw["age"])
    if keep.age == nil then
      return nil, "opts.keepJobs.age must be a number of seconds"
    end
  end
  if raw["limit"] ~= nil then
    keep.limit = tonumber(raw["limit"])
    if keep.limit == nil or keep.limit < 1 then
      return nil, "opts.keepJobs.limit must be a positive number"
    end
    keep.limit = int(keep.limit)
  end
  return keep
end
