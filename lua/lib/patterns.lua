--[[
  patterns.lua -- string.find, match, gmatch and gsub with a bound on the pattern matcher's work, for the
  sandbox (lua/lib/sandbox.lua), which the embedded server's scripts and functions run in too.

  Lua 5.1's matcher backtracks inside one C call, where no count hook runs: a pattern with q repetitions
  ('.-', '%d*', '[%w]+', ...) costs up to n^(q+1)/(q+1)! steps on a subject of n bytes (n^q/q! when anchored
  with '^'). A call whose bound passes max_steps is refused before it runs.

  Called with one table: string (the library to copy), error, type, select, format, next, text (the error's
  format: the function's name, the subject's length, the bound, max_steps) and max_steps. Returns a copy of
  the library with the four functions bounded (and rep, which makes an empty string at once). It reads no
  global.
]]

local lib = ...
local real_string, error, type, select, format, next = lib.string, lib.error, lib.type, lib.select, lib.format, lib.next
local text, max_steps = lib.text, lib.max_steps
local sub = real_string.sub

local function bound_of(s, p, plain)
  if plain or type(s) ~= 'string' or type(p) ~= 'string' then return 0 end
  local q, i, n, items = 0, 1, #p, 0
  local anchored = sub(p, 1, 1) == '^'
  while i <= n do
    local c = sub(p, i, i)
    if c == '%' and sub(p, i + 1, i + 1) == 'b' then
      -- %bxy scans ahead from where it starts for the balancing y: a repetition of its own
      q, i = q + 1, i + 4
    elseif c == '%' then
      i = i + 2
    elseif c == '[' then
      i = i + 1
      if sub(p, i, i) == '^' then i = i + 1 end
      if sub(p, i, i) == ']' then i = i + 1 end
      while i <= n and sub(p, i, i) ~= ']' do
        if sub(p, i, i) == '%' then i = i + 1 end
        i = i + 1
      end
      i = i + 1
    else
      i = i + 1
    end
    local after = sub(p, i, i)
    -- ('?' backtracks too: each optional item doubles the ways to try, so it counts as a repetition)
    if after == '*' or after == '+' or after == '-' or after == '?' then q, i = q + 1, i + 1 end
    items = items + 1
  end
  local w, bound = anchored and q or q + 1, 1
  for k = 1, w do bound = bound * #s / k end
  -- every way to try compares up to the pattern's items with the subject
  return bound * items
end

-- (plain_at: the position of find's 'plain' argument)
local function bounded(name, f, plain_at)
  return function(s, p, ...)
    local plain = plain_at and select('#', ...) >= plain_at - 2 and (select(plain_at - 2, ...))
    local bound = bound_of(s, p, plain)
    if bound > max_steps then error(format(text, name, #s, bound, max_steps), 2) end
    return f(s, p, ...)
  end
end

local out = {}
for k, v in next, real_string do out[k] = v end
-- string.rep loops in C, n times, where no count hook runs: an empty string repeated 2^31 times takes seconds
-- and makes nothing (a non-empty one is stopped by the memory cap)
out.rep = function(s, n, ...)
  if s == '' and type(n) == 'number' then return '' end
  local r = real_string.rep(s, n, ...)  -- (not a tail call: an error names 'rep', as Redis's does)
  return r
end
out.find = bounded('find', real_string.find, 4)
out.match = bounded('match', real_string.match)
out.gmatch = bounded('gmatch', real_string.gmatch)
out.gsub = bounded('gsub', real_string.gsub)
return out
