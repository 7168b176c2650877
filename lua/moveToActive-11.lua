--[[
  moveToActive-11.lua -- a worker asks for a job: take the next one from
  `wait` (or `prioritized`), put it in `active`, lock it for the worker and
  reply with its fields. Protocol: PROTOCOL.md §2 and §1.7.

  KEYS
     1  wait         LIST
     2  active       LIST
     3  prioritized  ZSET
     4  events       STREAM
     5  stalled      SET     passed for arity; not read (a job becomes a stall
                             candidate only when a sweep marks it)
     6  limiter      STRING  rate-limit counter with PX = window
     7  delayed      ZSET    due jobs are promoted first
     8  paused       LIST    unused (kept for arity, as in BullMQ v6)
     9  meta         HASH    paused, concurrency, max, duration
    10  pc           STRING  priority counter
    11  marker       ZSET

  ARGV
     1  keys prefix "emq:{q}:" (trailing colon)
     2  timestamp (ms): processedOn of the job, delayed-promotion time
     3  msgpack map: token (lock token; "0" = take no lock), lockDuration (ms,
        default 30000), limiter {max, duration (ms)}, name (worker, stored as pb)

  RETURNS
     {fields, id, 0, 0}   the job (flat HGETALL, after processedOn/ats/pb were set)
     {0, 0, ttl, 0}       rate limited: try again in ttl ms
     {0, 0, 0, dueAt}     nothing to take; the next delayed job is due at dueAt (ms)
     {0, 0, 0, 0}         nothing to take, or the queue is paused / at concurrency

  SECTIONS: one -- the shared fetch in includes/fetchNextJob.lua, the same
  code moveToFinished-14 runs for its fetch-next.
  Differences from BullMQ: legacy "0:" wait-list markers (BullMQ < v5) are
  not recognised; emqlab never writes them.
]]
--@include "includes/fetchNextJob.lua"

local opts = cmsgpack.unpack(ARGV[3])
if type(opts) ~= "table" or tokenOf(opts) == nil then
  return redis.error_reply("ERR emqlab: ARGV[3] must be a msgpack map with a token (\"0\" = no lock)")
end
local now = tonumber(ARGV[2])
if now == nil then
  return redis.error_reply("ERR emqlab: ARGV[2] must be a timestamp in ms")
end

local q = {
  wait = KEYS[1], active = KEYS[2], prioritized = KEYS[3], events = KEYS[4],
  limiter = KEYS[6], delayed = KEYS[7], meta = KEYS[9], pc = KEYS[10], marker = KEYS[11],
}
return fetchNextJob(q, ARGV[1], int(now), opts) or {0, 0, 0, 0}
