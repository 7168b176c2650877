--[[
  includes/addJob.lua -- what addStandardJob-9, addDelayedJob-6 and
  addPrioritizedJob-9 share (PROTOCOL.md §4.2).

  Their ARGV:
     1  msgpack array: [1] keys prefix, [2] custom id or "", [3] name,
        [4] timestamp (ms), [5] parent key, [6] parent dependencies key,
        [7] parent {id, queueKey}, [8] repeat job key, [9] deduplication key
     2  job data (JSON text, stored as is)
     3  msgpack map of job options (delay ms, priority, lifo, attempts, ...),
        stored as JSON in the hash's `opts` field

  emqlab does not implement flows (parent/child), deduplication or job
  schedulers: an add that asks for any of them gets an error reply and
  nothing is written.
]]
--@include "includes/common.lua"

local function present(v)
  return v ~= nil and v ~= false and v ~= ""
end

-- Decode and check ARGV. Returns the job description, or nil and an error reply.
local function readNewJob()
  local args = cmsgpack.unpack(ARGV[1])
  local opts = cmsgpack.unpack(ARGV[3] or "")
  if type(args) ~= "table" then
    return nil, redis.error_reply("ERR emqlab: ARGV[1] must be a msgpack array")
  end
  if type(opts) ~= "table" then
    return nil, redis.error_reply("ERR emqlab: ARGV[3] must be a msgpack map of job options")
  end
  if present(args[5]) or present(args[6]) or present(args[7]) or present(opts["parent"]) then
    return nil, redis.error_reply("ERR emqlab: parent jobs are not supported")
  end
  if present(args[9]) or present(opts["de"]) or present(opts["deduplication"]) then
    return nil, redis.error_reply("ERR emqlab: deduplication is not supported")
  end
  if present(args[8]) or present(opts["repeat"]) then
    return nil, redis.error_reply("ERR emqlab: repeatable jobs (job schedulers) are not supported")
  end
  local timestamp = tonumber(args[4])
  if not present(args[1]) or timestamp == nil or ARGV[2] == nil then
    return nil, redis.error_reply("ERR emqlab: add needs a prefix, a timestamp (ms) and job data")
  end
  local customId = ""
  if present(args[2]) then
    customId = tostring(args[2])
  end
  return {
    prefix = args[1],
    customId = customId,
    name = tostring(args[3] or ""),
    timestamp = int(timestamp),
    data = ARGV[2],
    opts = opts,
    delay = int(tonumber(opts["delay"]) or 0),
    priority = int(tonumber(opts["priority"]) or 0),
  }
end

-- The job's id: the custom id, or the value of the queue's id counter. The
-- counter is incremented in both cases, so it never goes backwards.
-- Returns id, job key, and whether a job with that custom id already exists.
local function allocateJobId(idKey, job)
  local counter = call("INCR", idKey)
  local id = job.customId
  if id == "" then
    id = decimal(counter)
  end
  local jobKey = job.prefix .. id
  local exists = job.customId ~= "" and call("EXISTS", jobKey) == 1
  return id, jobKey, exists
end

-- A custom id that is taken: the existing job is left alone, an event says so.
local function reportDuplicate(eventsKey, cap, id)
  call("XADD", eventsKey, "MAXLEN", "~", cap, "*", "event", "duplicated", "jobId", id)
  return id
end

-- Write the job hash and the "added" event.
local function storeNewJob(eventsKey, jobKey, id, job)
  call("HMSET", jobKey, "name", job.name, "data", job.data, "opts", cjson.encode(job.opts),
    "timestamp", job.timestamp, "delay", job.delay, "priority", job.priority)
  call("XADD", eventsKey, "*", "event", "added", "jobId", id, "name", job.name)
end

-- The part every add script shares: check the arguments, take the id, store the job. Returns the id, the
-- event stream's cap and the job; or nil and the reply the script must return at once (bad arguments, or a
-- custom id that is taken).
local function addNewJob(idKey, metaKey, eventsKey)
  local job, problem = readNewJob()
  if not job then
    return nil, problem
  end
  local id, jobKey, duplicate = allocateJobId(idKey, job)
  local cap = eventCap(metaKey)
  if duplicate then
    return nil, reportDuplicate(eventsKey, cap, id)
  end
  storeNewJob(eventsKey, jobKey, id, job)
  return id, cap, job
end
