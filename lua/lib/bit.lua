--[[
bit.lua -- a pure Lua 5.1 implementation of the LuaBitOp API that Redis
exposes to scripts as the global `bit`.

Sources of truth
  * the LuaBitOp API documentation (function list, 32-bit semantics);
  * the observable behaviour of `bit` inside Redis 7.0 scripts, probed with
    EVAL (tests/test_cmsgpack.py compares every function with a live server).
  Written from scratch in plain arithmetic: no `bit` library, no integer
  division operator, no string.pack.

Semantics
  * Every argument is read like LuaBitOp's C code does: the number (or
    numeric string) x is turned into the double x + 2^52 + 2^51 and the low
    32 bits of that double's bit pattern are the operand.  So fractions are
    rounded to nearest-even, values are taken modulo 2^32, and numbers so
    large that the addition loses bits give the same "garbage" Redis gives.
    inf and NaN become 0.
  * Every result is a signed 32-bit number (-2^31 .. 2^31-1).
  * Functions: tobit, tohex(x [, n]), bnot, band/bor/bxor (one or more
    arguments), lshift, rshift, arshift, rol, ror (shift counts use their
    low 5 bits), bswap.
  * A missing or non-numeric argument raises
    "bad argument #i to 'name' (number expected, got <type>)" at the
    caller's position, as luaL_typerror does.

Loading: the file returns the module table and creates no globals.  Use
`require("bit")` with lua/lib on package.path (or LUA_PATH), or run the
file's text with lupa and keep the returned table.
]]

local M = {}

local floor, frexp, ldexp = math.floor, math.frexp, math.ldexp
local format, sub = string.format, string.sub
local type, tonumber, select, error = type, tonumber, select, error

local TWO31 = 2147483648
local TWO32 = 4294967296
local TWO52 = 4503599627370496
local TWO53 = 9007199254740992
local MAGIC = 6755399441055744 -- 2^52 + 2^51, LuaBitOp's conversion constant

-- The number behind a LuaBitOp argument, or nil for "not a number"
-- (luaL_checknumber accepts numbers and numeric strings).
local function number_of(v)
  local tv = type(v)
  if tv == "number" then return v end
  if tv == "string" then return tonumber(v) end
  return nil
end

-- Low 32 bits of the IEEE 754 bit pattern of x + MAGIC, as an unsigned
-- integer in [0, 2^32).
local function to_u32(x)
  local s = x + MAGIC
  if s >= TWO52 and s < TWO53 then
    -- The usual case, |x| < 2^51: s is an integer whose 52-bit fraction
    -- field is s - 2^52, and 2^52 is a multiple of 2^32.
    return s % TWO32
  end
  if s ~= s or s == 0 or s == 1 / 0 or s == -1 / 0 then
    return 0 -- NaN (default payload), zero and inf have zero low bits
  end
  if s < 0 then s = -s end -- the sign bit is not among the low 32 bits
  -- s = m * 2^e with 0.5 <= m < 1; the significand with its hidden bit is
  -- m * 2^53 (an integer), and the hidden bit 2^52 is a multiple of 2^32.
  -- (s cannot be subnormal: the addition leaves it >= 1 in magnitude.)
  local m = frexp(s)
  return ldexp(m, 53) % TWO32
end

-- Reads argument `index` of `name` as an unsigned 32-bit value, raising
-- LuaBitOp's error at the position of the library function's caller (so it
-- must be called directly from the public function: error level 3).
local function arg_u32(name, nargs, index, v)
  local x = number_of(v)
  if x == nil then
    local got = index > nargs and "no value" or type(v)
    error(format("bad argument #%d to '%s' (number expected, got %s)",
      index, name, got), 3)
  end
  return to_u32(x)
end

-- Unsigned [0, 2^32) to signed [-2^31, 2^31).
local function signed(u)
  if u >= TWO31 then return u - TWO32 end
  return u
end

-- Lookup tables for the bitwise operators on two 4-bit nibbles:
-- OP[a * 16 + b] for 0 <= a, b < 16.
local AND, OR, XOR = {}, {}, {}
for a = 0, 15 do
  for b = 0, 15 do
    local r_and, r_or, r_xor, p = 0, 0, 0, 1
    local x, y = a, b
    for _ = 1, 4 do
      local xb, yb = x % 2, y % 2
      if xb == 1 and yb == 1 then r_and = r_and + p end
      if xb == 1 or yb == 1 then r_or = r_or + p end
      if xb ~= yb then r_xor = r_xor + p end
      x, y, p = (x - xb) / 2, (y - yb) / 2, p * 2
    end
    AND[a * 16 + b], OR[a * 16 + b], XOR[a * 16 + b] = r_and, r_or, r_xor
  end
end

-- Applies a nibble table to two unsigned 32-bit values, nibble by nibble.
local function combine(tbl, a, b)
  local r, p = 0, 1
  for _ = 1, 8 do
    local an, bn = a % 16, b % 16
    r = r + tbl[an * 16 + bn] * p
    a, b, p = (a - an) / 16, (b - bn) / 16, p * 16
  end
  return r
end

-- band/bor/bxor: LuaBitOp reads argument 1, then the others from the last
-- one down, which decides which bad argument is reported first.
local function variadic(name, tbl)
  return function(...)
    local nargs = select("#", ...)
    local acc = arg_u32(name, nargs, 1, (...))
    if nargs == 2 then
      -- the common case, without building an argument table
      local _, b = ...
      return signed(combine(tbl, acc, arg_u32(name, nargs, 2, b)))
    end
    local args = { ... }
    for i = nargs, 2, -1 do
      acc = combine(tbl, acc, arg_u32(name, nargs, i, args[i]))
    end
    return signed(acc)
  end
end

M.band = variadic("band", AND)
M.bor = variadic("bor", OR)
M.bxor = variadic("bxor", XOR)

--- Normalise a number to a signed 32-bit integer.
function M.tobit(...)
  return signed(arg_u32("tobit", select("#", ...), 1, (...)))
end

--- Bitwise not.
function M.bnot(...)
  return signed(TWO32 - 1 - arg_u32("bnot", select("#", ...), 1, (...)))
end

-- Reads the shift count (argument 2) of `name`: its low 5 bits.  Like
-- arg_u32, it must be called directly from the public function.
local function shift_count(name, nargs, n)
  local x = number_of(n)
  if x == nil then
    local got = 2 > nargs and "no value" or type(n)
    error(format("bad argument #2 to '%s' (number expected, got %s)", name, got), 3)
  end
  return to_u32(x) % 32
end

--- Logical shift left.
function M.lshift(...)
  local nargs, x, n = select("#", ...), ...
  local u = arg_u32("lshift", nargs, 1, x)
  local c = shift_count("lshift", nargs, n)
  return signed((u * 2 ^ c) % TWO32)
end

--- Logical shift right.
function M.rshift(...)
  local nargs, x, n = select("#", ...), ...
  local u = arg_u32("rshift", nargs, 1, x)
  local c = shift_count("rshift", nargs, n)
  return signed(floor(u / 2 ^ c))
end

--- Arithmetic shift right (the sign bit is copied in).
function M.arshift(...)
  local nargs, x, n = select("#", ...), ...
  local u = arg_u32("arshift", nargs, 1, x)
  local c = shift_count("arshift", nargs, n)
  return floor(signed(u) / 2 ^ c)
end

-- Rotation of u left by c (0 <= c < 32) bits.
local function rotate_left(u, c)
  local high = floor(u / 2 ^ (32 - c)) -- the bits that wrap around
  return (u - high * 2 ^ (32 - c)) * 2 ^ c + high
end

--- Rotate left.
function M.rol(...)
  local nargs, x, n = select("#", ...), ...
  local u = arg_u32("rol", nargs, 1, x)
  local c = shift_count("rol", nargs, n)
  return signed(rotate_left(u, c))
end

--- Rotate right.
function M.ror(...)
  local nargs, x, n = select("#", ...), ...
  local u = arg_u32("ror", nargs, 1, x)
  local c = shift_count("ror", nargs, n)
  return signed(rotate_left(u, (32 - c) % 32))
end

--- Swap the four bytes (endianness).
function M.bswap(...)
  local u = arg_u32("bswap", select("#", ...), 1, (...))
  local b4 = u % 256
  u = (u - b4) / 256
  local b3 = u % 256
  u = (u - b3) / 256
  local b2 = u % 256
  local b1 = (u - b2) / 256
  return signed(((b4 * 256 + b3) * 256 + b2) * 256 + b1)
end

--- Hex string of the low |n| nibbles of x (n defaults to 8; a negative n
-- gives upper-case digits; |n| above 8 counts as 8).
function M.tohex(...)
  local nargs, x, n = select("#", ...), ...
  local u = arg_u32("tohex", nargs, 1, x)
  local digits = 8
  if nargs >= 2 then digits = signed(arg_u32("tohex", nargs, 2, n)) end
  local fmt = "%08x"
  if digits < 0 then digits, fmt = -digits, "%08X" end
  if digits > 8 then digits = 8 end
  if digits == 0 then return "" end
  return sub(format(fmt, u), 9 - digits)
end

return M
