--[[
  includes/common.lua -- small helpers shared by every emqlab queue script.

  The registry (emqlab/registry.py, flatten) pastes this file into a script at
  its first `--@include` line, once per script, so everything below is a
  `local`: a script never creates a global in the server's Lua state.

  Facts used here come from PROTOCOL.md §1.7 (markers, priority score),
  §4.3 (delayed score, sibling keys) and §1.4 step 7 (event stream cap).
]]

local call = redis.call

-- A number argument for redis.call, made integral. Lua 5.1 numbers are
-- doubles; Redis would accept "30000" but not "30000.5" for PX, and string
-- concatenation of a large double gives "1.7e+15", so every computed number
-- that reaches the server goes through here (or is already an integer).
local function int(value)
  return math.floor(tonumber(value))
end

-- A number formatted as a plain decimal string (no exponent), for building
-- job ids out of counters.
local function decimal(value)
  return string.format("%d", int(value))
end

-- Call `command key item...` for a long list of items, a few thousand at a
-- time (Lua's C stack limits how many values unpack may spread).
local function callInBatches(command, key, items)
  local step = 4000
  for first = 1, #items, step do
    call(command, key, unpack(items, first, math.min(first + step - 1, #items)))
  end
end

-- "Held" means no worker may take a job right now: the meta hash has a
-- `paused` field, or a global `concurrency` is set and `active` already holds
-- that many jobs. `activeDelta` adjusts the active count for a caller that is
-- about to remove a job from `active` (a retry computing it in advance).
local function queueHeld(metaKey, activeKey, activeDelta)
  local meta = call("HMGET", metaKey, "paused", "concurrency")
  if meta[1] then
    return true
  end
  local concurrency = tonumber(meta[2])
  if concurrency then
    return call("LLEN", activeKey) + (activeDelta or 0) >= concurrency
  end
  return false
end

-- Wake blocked workers: member "0" with score 0 in the marker ZSET means
-- "there is work now". Skipped while the queue is held.
local function signalWork(markerKey, held)
  if not held then
    call("ZADD", markerKey, 0, "0")
  end
end

-- Delayed jobs are scored (due time in ms) * 4096 + a sequence number, so
-- that up to 4096 jobs due in the same millisecond keep their order.
local DELAY_SHIFT = 0x1000

-- The due time (ms) of the earliest delayed job, or nil when none is delayed.
local function earliestDue(delayedKey)
  local head = call("ZRANGE", delayedKey, 0, 0, "WITHSCORES")
  if head[2] then
    return math.floor(tonumber(head[2]) / DELAY_SHIFT)
  end
  return nil
end

-- Member "1" of the marker, scored with the earliest due time, lets a blocked
-- worker know when the next delayed job becomes due.
local function signalDelayed(markerKey, delayedKey)
  local due = earliestDue(delayedKey)
  if due then
    call("ZADD", markerKey, due, "1")
  end
end

-- The score a job due at `dueAt` (ms) gets in `delayed`: the first free slot
-- among the 4096 of that millisecond (the last slot is shared once they are
-- all taken).
local function delayedScore(delayedKey, dueAt)
  local lowest = int(dueAt) * DELAY_SHIFT
  local highest = lowest + DELAY_SHIFT - 1
  local taken = call("ZREVRANGEBYSCORE", delayedKey, highest, lowest, "WITHSCORES", "LIMIT", 0, 1)
  if taken[2] then
    return math.min(tonumber(taken[2]) + 1, highest)
  end
  return lowest
end

-- The score of a prioritized job: priority in the high 32 bits, the queue's
-- running counter `pc` in the low 32 bits (equal priorities stay FIFO).
local function priorityScore(pcKey, priority)
  local sequence = call("INCR", pcKey)
  return int(priority) * 0x100000000 + sequence % 0x100000000
end

-- The cap of the event stream: meta field "opts.maxLenEvents"; when the field
-- is absent it is created with the default 10000 (as BullMQ does).
local function eventCap(metaKey, known)
  local cap = known or call("HGET", metaKey, "opts.maxLenEvents")
  if not cap then
    cap = 10000
    call("HSET", metaKey, "opts.maxLenEvents", cap)
  end
  return cap
end

-- Trim the event stream (approximately) to its cap. Scripts do it before
-- their own XADDs so that they never trim away what they just emitted.
local function trimEvents(metaKey, eventsKey, knownCap)
  call("XTRIM", eventsKey, "MAXLEN", "~", eventCap(metaKey, knownCap))
end

-- Delete a job: its hash and the sibling keys a job may own.
local function deleteJobKeys(jobKey)
  call("DEL", jobKey, jobKey .. ":logs", jobKey .. ":dependencies", jobKey .. ":processed",
    jobKey .. ":failed", jobKey .. ":unsuccessful")
end

-- The lock token of a decoded options map, as a string; nil when missing.
local function tokenOf(opts)
  local token = opts["token"]
  if token == nil then
    return nil
  end
  return tostring(token)
end

-- Lock time-to-live in ms for a newly fetched job (default 30000).
local function lockMsOf(opts)
  local ms = tonumber(opts["lockDuration"])
  if ms == nil or ms < 1 then
    return 30000
  end
  return int(ms)
end
