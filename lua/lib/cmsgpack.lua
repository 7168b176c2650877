--[[
cmsgpack.lua -- a pure Lua 5.1 MessagePack codec that behaves like the
`cmsgpack` module built into Redis's Lua scripting engine.

Sources of truth
  * the MessagePack format specification (type bytes, big-endian payloads,
    IEEE 754 float32/float64);
  * the observable behaviour of `cmsgpack` inside Redis 7.0 scripts, probed
    with EVAL (tests/test_cmsgpack.py compares this file with a live server
    byte for byte).  Written from scratch; no code was taken from Redis or
    from other MessagePack libraries.

API (same names and results as Redis):
  cmsgpack.pack(v1, v2, ...)            -> string; every argument encoded, concatenated
  cmsgpack.unpack(s)                    -> every object in s, as multiple values
  cmsgpack.unpack_one(s [, offset])     -> next_offset, value
  cmsgpack.unpack_limit(s, limit [, offset]) -> next_offset, value1 .. valueN
      (offsets are 0-based byte offsets; next_offset is -1 once s is used up)

Behaviour worth knowing (all checked against Redis 7.0):
  * Lua has one number type (a double).  pack() writes a number that is
    integral and inside [-2^63, 2^63) with the smallest int format (positive
    fixint, uint8/16/32/64, negative fixint, int8/16/32/64; -0.0 becomes 0);
    any other number as float32 (0xca) when float32 holds it exactly (this
    includes +-inf), else as float64 (0xcb).  NaN is written as float64
    with its sign kept (Lua 5.1 cannot see a NaN's payload, so the quiet
    NaN 0x7ff8... / 0xfff8... is written).
  * Strings use fixstr (0xa0+n) for n < 32, then str8 (0xd9), str16 (0xda),
    str32 (0xdb).  pack() never writes bin.
  * A table whose keys are exactly the integers 1..n (n >= 0, so {} too) is
    an array (fixarray / 0xdc / 0xdd), any other table a map (fixmap / 0xde
    / 0xdf) written in next() order.  That order belongs to the host Lua: it
    is the same as Redis's for the same insertions, except that Redis's Lua
    hashes strings of 32+ bytes differently from stock Lua 5.1, so maps with
    such keys (or with table keys) may come out in another order.  Tables
    nested more than 16 levels deep are written as nil (0xc0), like Redis;
    this is also what stops a cycle (no error is raised, as in Redis).
    Functions, userdata and threads are written as nil.
  * unpack(): every int format becomes a number; uint64 is read as a signed
    int64, exactly as Redis does (0xcf ff..ff is -1).  float32/float64 are
    decoded exactly (negative zero, subnormals, inf, NaN with its sign).
    nil inside an array leaves a hole (so [1, nil, 3] comes back as the
    table {[1]=1, [3]=3}); a nil map value drops the key; a nil or NaN map
    key raises "table index is nil" / "table index is NaN".
  * Deliberate extension: bin8/16/32 (0xc4..0xc6) decode to Lua strings.
    Redis 7.0 rejects them with "Bad data format in input.".
  * ext/fixext (0xc7..0xc9, 0xd4..0xd8) and 0xc1 raise
    "Bad data format in input."; input that ends early raises
    "Missing bytes in input."  Both errors carry the caller's position, as
    Redis's luaL_error does (one difference: in `return cmsgpack.unpack(s)`
    Redis reports the returning line, while a Lua function that is
    tail-called cannot see that frame).  Like Redis, decoding stops with
    "stack overflow (too many return values at once; use unpack_one or
    unpack_limit instead.)" once it would need more than 8000 Lua stack
    slots (about 8000 top-level objects, or about 4000 levels of nesting).

Loading: the file returns the module table and creates no globals.  Use
`require("cmsgpack")` with lua/lib on package.path (or LUA_PATH), or run
the file's text with lupa and keep the returned table.
]]

local M = {}

local byte, char, sub, format = string.byte, string.char, string.sub, string.format
local floor, frexp, ldexp, huge = math.floor, math.frexp, math.ldexp, math.huge
local concat = table.concat
local type, next, select, tostring, tonumber = type, next, select, tostring, tonumber
local error, pcall = error, pcall
local unpack = unpack or table.unpack -- a global in Lua 5.1

local TWO32 = 4294967296          -- 2^32
local TWO52 = 4503599627370496    -- 2^52
local TWO63 = 9223372036854775808 -- 2^63

-- Lua 5.1 keeps at most LUAI_MAXCSTACK (8000) values in one C call frame;
-- Redis's decoder checks it before every value it pushes.
local MAX_STACK = 8000
-- Tables nested this many levels deep (the outermost is level 0) are
-- written as nil, as Redis does.
local MAX_NESTING = 16

local ERR_MISSING = "Missing bytes in input."
local ERR_BADFMT = "Bad data format in input."
local ERR_TOO_MANY = "stack overflow (too many return values at once; "
    .. "use unpack_one or unpack_limit instead.)"
local ERR_ARRAY_STACK = "stack overflow (in function mp_decode_to_lua_array)"
local ERR_OFFSET_STACK = "stack overflow (in function mp_unpack_full)"
-- Raised by the Lua core inside Redis's C code, so they carry no position.
local ERR_KEY_NIL = "table index is nil"
local ERR_KEY_NAN = "table index is NaN"

-- One-character strings for every byte value: the encoder's hot path.
local CHR = {}
for i = 0, 255 do CHR[i] = char(i) end

-- NaNs of both signs.  0/0 is computed at run time (Lua 5.1 does not fold a
-- division by zero); glibc prints a NaN with the sign bit set as "-nan".
local NAN_A = 0 / 0
local NAN_B = -NAN_A
local NEG_NAN, POS_NAN = NAN_A, NAN_B
if sub(tostring(NAN_A), 1, 1) ~= "-" then NEG_NAN, POS_NAN = NAN_B, NAN_A end

-- The type name a C argument check reports ("no value" for a missing one).
local function typename_of(n_args, index, value)
  if index > n_args then return "no value" end
  return type(value)
end

-- The four big-endian bytes of an integer 0 <= v < 2^32.
local function u32_bytes(v)
  local b4 = v % 256
  v = (v - b4) / 256
  local b3 = v % 256
  v = (v - b3) / 256
  local b2 = v % 256
  return (v - b2) / 256, b2, b3, b4
end

--------------------------------------------------------------------------
-- Encoding
--------------------------------------------------------------------------

-- Each encoder appends to buf after index n and returns the new last index.

local function encode_integer(buf, n, x)
  if x >= 0 then
    if x < 128 then
      buf[n + 1] = CHR[x]
    elseif x < 256 then
      buf[n + 1] = char(0xcc, x)
    elseif x < 65536 then
      buf[n + 1] = char(0xcd, floor(x / 256), x % 256)
    elseif x < TWO32 then
      buf[n + 1] = char(0xce, u32_bytes(x))
    else
      local hi = floor(x / TWO32)
      buf[n + 1] = char(0xcf, u32_bytes(hi))
      n = n + 1
      buf[n + 1] = char(u32_bytes(x - hi * TWO32))
    end
  elseif x >= -32 then
    buf[n + 1] = CHR[x + 256]
  elseif x >= -128 then
    buf[n + 1] = char(0xd0, x + 256)
  elseif x >= -32768 then
    x = x + 65536
    buf[n + 1] = char(0xd1, floor(x / 256), x % 256)
  elseif x >= -2147483648 then
    buf[n + 1] = char(0xd2, u32_bytes(x + TWO32))
  else
    -- Two's complement in two exact halves: hi is negative, lo in [0, 2^32).
    local hi = floor(x / TWO32)
    local lo = x - hi * TWO32
    buf[n + 1] = char(0xd3, u32_bytes(hi + TWO32))
    n = n + 1
    buf[n + 1] = char(u32_bytes(lo))
  end
  return n + 1
end

-- float32 if it holds x exactly (C's `(double)(float)x == x`), else float64.
local function encode_float(buf, n, x)
  if x ~= x then
    if sub(tostring(x), 1, 1) == "-" then
      buf[n + 1] = "\203\255\248\0\0\0\0\0\0"
    else
      buf[n + 1] = "\203\127\248\0\0\0\0\0\0"
    end
    return n + 1
  end
  if x == huge then
    buf[n + 1] = "\202\127\128\0\0"
    return n + 1
  elseif x == -huge then
    buf[n + 1] = "\202\255\128\0\0"
    return n + 1
  end
  local sign = 0
  if x < 0 then sign, x = 128, -x end
  -- x = m * 2^e with 0.5 <= m < 1 (x is not 0: zero is written as an int).
  local m, e = frexp(x)
  if e <= 128 and e >= -148 then
    -- A float32 keeps 24 significant bits when normal (e >= -125); a
    -- subnormal keeps the bits down to 2^-149.
    local bits = 24
    if e < -125 then bits = e + 149 end
    local mant = ldexp(m, bits)
    if mant == floor(mant) then
      local expo, frac = 0, mant -- subnormal: exponent field 0
      if e >= -125 then expo, frac = e + 126, mant - 8388608 end
      buf[n + 1] = char(0xca, sign + floor(expo / 2),
        (expo % 2) * 128 + floor(frac / 65536),
        floor(frac / 256) % 256, frac % 256)
      return n + 1
    end
  end
  local expo, frac
  if e >= -1021 then
    expo, frac = e + 1022, ldexp(m, 53) - TWO52
  else
    expo, frac = 0, ldexp(x, 1074) -- subnormal double
  end
  local hi = floor(frac / TWO32) -- top 20 bits of the fraction
  local lo = frac - hi * TWO32
  buf[n + 1] = char(0xcb, sign + floor(expo / 16),
    (expo % 16) * 16 + floor(hi / 65536), floor(hi / 256) % 256, hi % 256)
  buf[n + 2] = char(u32_bytes(lo))
  return n + 2
end

local function encode_number(buf, n, x)
  -- NaN fails x == floor(x); +inf fails x < 2^63; -inf fails x >= -2^63.
  if x == floor(x) and x < TWO63 and x >= -TWO63 then
    return encode_integer(buf, n, x)
  end
  return encode_float(buf, n, x)
end

local function encode_string(buf, n, s)
  local len = #s
  if len < 32 then
    buf[n + 1] = CHR[0xa0 + len]
  elseif len < 256 then
    buf[n + 1] = char(0xd9, len)
  elseif len < 65536 then
    buf[n + 1] = char(0xda, floor(len / 256), len % 256)
  else
    buf[n + 1] = char(0xdb, u32_bytes(len))
  end
  buf[n + 2] = s
  return n + 2
end

local encode_value -- forward declaration (tables recurse)

local function encode_table(buf, n, t, level)
  -- An array has only positive integral keys and as many keys as the
  -- largest one, i.e. exactly 1..count.
  local count, max, is_array = 0, 0, true
  for k in next, t do
    if type(k) == "number" and k > 0 and k == floor(k) then
      count = count + 1
      if k > max then max = k end
    else
      is_array = false
      count = count + 1
    end
  end
  if is_array and count ~= max then is_array = false end

  if count < 16 then
    buf[n + 1] = CHR[(is_array and 0x90 or 0x80) + count]
  elseif count < 65536 then
    buf[n + 1] = char(is_array and 0xdc or 0xde, floor(count / 256), count % 256)
  else
    buf[n + 1] = char(is_array and 0xdd or 0xdf, u32_bytes(count))
  end
  n = n + 1

  level = level + 1
  if is_array then
    for i = 1, count do
      -- every key 1..count exists, so t[i] never reaches an __index
      n = encode_value(buf, n, t[i], level)
    end
  else
    for k, v in next, t do
      if type(k) == "string" and #k < 32 then
        -- fast path for the usual short string key
        buf[n + 1] = CHR[0xa0 + #k]
        buf[n + 2] = k
        n = n + 2
      else
        n = encode_value(buf, n, k, level)
      end
      n = encode_value(buf, n, v, level)
    end
  end
  return n
end

encode_value = function(buf, n, v, level)
  local tv = type(v)
  if tv == "string" then
    return encode_string(buf, n, v)
  elseif tv == "number" then
    if v < 128 and v >= 0 and v == floor(v) then -- positive fixint
      buf[n + 1] = CHR[v]
      return n + 1
    end
    return encode_number(buf, n, v)
  elseif tv == "table" then
    if level < MAX_NESTING then return encode_table(buf, n, v, level) end
  elseif tv == "boolean" then
    buf[n + 1] = v and "\195" or "\194"
    return n + 1
  end
  -- nil, function, userdata, thread, and tables nested too deeply
  buf[n + 1] = "\192"
  return n + 1
end

local shared_buf, buf_busy = {}, false

--- Encode every argument and return the concatenated MessagePack bytes.
function M.pack(...)
  local nargs = select("#", ...)
  if nargs == 0 then
    error("bad argument #0 to 'pack' (MessagePack pack needs input.)", 2)
  end
  -- Growing a fresh buffer table costs several rehashes, so one buffer is
  -- reused between calls (a fresh one is taken if pack is ever re-entered,
  -- e.g. from a __gc metamethod).
  local buf = shared_buf
  if buf_busy then buf = {} else buf_busy = true end
  local n = 0
  if nargs == 1 then
    n = encode_value(buf, n, (...), 0)
  else
    local args = { ... }
    for i = 1, nargs do
      n = encode_value(buf, n, args[i], 0)
    end
  end
  local out = concat(buf, "", 1, n)
  if buf == shared_buf then
    if n > 4096 then
      shared_buf = {} -- do not keep a huge buffer alive
    else
      for i = 1, n do buf[i] = nil end
    end
    buf_busy = false
  end
  return out
end

--------------------------------------------------------------------------
-- Decoding
--------------------------------------------------------------------------

-- decode(s, pos, used) reads the object whose type byte is at s[pos] and
-- returns value, position after it.  `used` counts the Lua stack slots
-- Redis's C decoder would hold at this point; it only feeds the
-- MAX_STACK emulation.  Errors are raised with level 0 and given the
-- caller's position by the public functions.

local decode -- forward declaration

local function decode_array(s, pos, count, used)
  used = used + 1 -- the new table
  if used + 1 > MAX_STACK then error(ERR_ARRAY_STACK, 0) end
  local t = {}
  local v
  for i = 1, count do
    v, pos = decode(s, pos, used + 1) -- + the index being filled
    t[i] = v -- a nil element leaves a hole, as in Redis
  end
  return t, pos
end

local function decode_map(s, pos, count, used)
  used = used + 1 -- the new table
  local t = {}
  local k, v, b, last
  for _ = 1, count do
    b = byte(s, pos)
    if b and b >= 0xa0 and b < 0xc0 and used < MAX_STACK then
      -- fast path for the usual fixstr key (same checks as decode)
      last = pos + b - 0xa0
      if last > #s then error(ERR_MISSING, 0) end
      k, pos = sub(s, pos + 1, last), last + 1
    else
      k, pos = decode(s, pos, used)
    end
    v, pos = decode(s, pos, used + 1) -- + the key
    if k == nil then error(ERR_KEY_NIL, 0) end
    if k ~= k then error(ERR_KEY_NAN, 0) end
    t[k] = v
  end
  return t, pos
end

-- A string of len bytes whose first byte is at s[first].
local function read_string(s, first, len)
  local last = first + len - 1
  if last > #s then error(ERR_MISSING, 0) end
  return sub(s, first, last), last + 1
end

-- Big-endian unsigned integer of `size` (2 or 4) bytes after the type byte
-- at s[pos]; errors when the input is too short.
local function read_uint(s, pos, size)
  if pos + size > #s then error(ERR_MISSING, 0) end
  if size == 2 then
    local b1, b2 = byte(s, pos + 1, pos + 2)
    return b1 * 256 + b2
  end
  local b1, b2, b3, b4 = byte(s, pos + 1, pos + 4)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end

-- Signed 64-bit integer after the type byte at s[pos] (also used for
-- uint64, which Redis reads as signed).  hi * 2^32 is exact, so the sum is
-- rounded once, exactly like C's (double)int64.
local function read_int64(s, pos)
  if pos + 8 > #s then error(ERR_MISSING, 0) end
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, pos + 1, pos + 8)
  local hi = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  if hi >= 2147483648 then hi = hi - TWO32 end
  return hi * TWO32 + (((b5 * 256 + b6) * 256 + b7) * 256 + b8)
end

local function read_float32(s, pos)
  if pos + 4 > #s then error(ERR_MISSING, 0) end
  local b1, b2, b3, b4 = byte(s, pos + 1, pos + 4)
  local negative = b1 >= 128
  local expo = (b1 % 128) * 2 + floor(b2 / 128)
  local frac = ((b2 % 128) * 256 + b3) * 256 + b4
  local v
  if expo == 0 then
    v = ldexp(frac, -149)
  elseif expo == 255 then
    if frac ~= 0 then return negative and NEG_NAN or POS_NAN end
    v = huge
  else
    v = ldexp(frac + 8388608, expo - 150)
  end
  if negative then v = -v end
  return v
end

local function read_float64(s, pos)
  if pos + 8 > #s then error(ERR_MISSING, 0) end
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, pos + 1, pos + 8)
  local negative = b1 >= 128
  local expo = (b1 % 128) * 16 + floor(b2 / 16)
  local frac = (((b2 % 16) * 256 + b3) * 256 + b4) * TWO32
      + (((b5 * 256 + b6) * 256 + b7) * 256 + b8)
  local v
  if expo == 0 then
    v = ldexp(frac, -1074)
  elseif expo == 2047 then
    if frac ~= 0 then return negative and NEG_NAN or POS_NAN end
    v = huge
  else
    v = ldexp(frac + TWO52, expo - 1075)
  end
  if negative then v = -v end
  return v
end

decode = function(s, pos, used)
  local b = byte(s, pos)
  if b == nil then error(ERR_MISSING, 0) end
  if used + 1 > MAX_STACK then error(ERR_TOO_MANY, 0) end

  -- The fix* families first: they are the common case.
  if b < 0x80 then return b, pos + 1 end                  -- positive fixint
  if b >= 0xe0 then return b - 256, pos + 1 end           -- negative fixint
  if b >= 0xa0 then
    if b < 0xc0 then                                      -- fixstr
      local last = pos + b - 0xa0
      if last > #s then error(ERR_MISSING, 0) end
      return sub(s, pos + 1, last), last + 1
    end
  elseif b >= 0x90 then
    return decode_array(s, pos + 1, b - 0x90, used)       -- fixarray
  else
    return decode_map(s, pos + 1, b - 0x80, used)         -- fixmap
  end

  -- 0xc0 .. 0xdf
  if b == 0xc0 then return nil, pos + 1 end
  if b == 0xc2 then return false, pos + 1 end
  if b == 0xc3 then return true, pos + 1 end
  if b == 0xcc then                                       -- uint8
    local v = byte(s, pos + 1)
    if v == nil then error(ERR_MISSING, 0) end
    return v, pos + 2
  end
  if b == 0xcd then return read_uint(s, pos, 2), pos + 3 end -- uint16
  if b == 0xce then return read_uint(s, pos, 4), pos + 5 end -- uint32
  if b == 0xcf or b == 0xd3 then return read_int64(s, pos), pos + 9 end
  if b == 0xd0 then                                       -- int8
    local v = byte(s, pos + 1)
    if v == nil then error(ERR_MISSING, 0) end
    if v >= 128 then v = v - 256 end
    return v, pos + 2
  end
  if b == 0xd1 then                                       -- int16
    local v = read_uint(s, pos, 2)
    if v >= 32768 then v = v - 65536 end
    return v, pos + 3
  end
  if b == 0xd2 then                                       -- int32
    local v = read_uint(s, pos, 4)
    if v >= 2147483648 then v = v - TWO32 end
    return v, pos + 5
  end
  if b == 0xca then return read_float32(s, pos), pos + 5 end
  if b == 0xcb then return read_float64(s, pos), pos + 9 end
  if b == 0xd9 or b == 0xc4 then                          -- str8, bin8
    local len = byte(s, pos + 1)
    if len == nil then error(ERR_MISSING, 0) end
    return read_string(s, pos + 2, len)
  end
  if b == 0xda or b == 0xc5 then                          -- str16, bin16
    return read_string(s, pos + 3, read_uint(s, pos, 2))
  end
  if b == 0xdb or b == 0xc6 then                          -- str32, bin32
    return read_string(s, pos + 5, read_uint(s, pos, 4))
  end
  if b == 0xdc then return decode_array(s, pos + 3, read_uint(s, pos, 2), used) end
  if b == 0xdd then return decode_array(s, pos + 5, read_uint(s, pos, 4), used) end
  if b == 0xde then return decode_map(s, pos + 3, read_uint(s, pos, 2), used) end
  if b == 0xdf then return decode_map(s, pos + 5, read_uint(s, pos, 4), used) end
  -- 0xc1 (never used), ext 8/16/32 (0xc7..0xc9), fixext (0xd4..0xd8)
  error(ERR_BADFMT, 0)
end

-- Decodes objects from byte offset `offset` (0-based) while fewer than
-- `limit` were read (limit nil: all), storing them in out[first..].
-- Returns the count and the 1-based position after the last object.
local function decode_stream(s, offset, limit, out, first, base_used)
  local pos, last, count = offset + 1, #s, 0
  while pos <= last and (limit == nil or count < limit) do
    local v
    v, pos = decode(s, pos, base_used + count)
    out[first + count] = v
    count = count + 1
  end
  return count, pos
end

-- Returns out[1..n] as multiple values.  `unpack` itself checks its own C
-- stack frame (3 arguments), so the first few values are returned directly
-- to let Redis's full 8000-slot budget through.
local function return_all(out, n)
  if n < 7900 then return unpack(out, 1, n) end
  return out[1], out[2], out[3], out[4], unpack(out, 5, n)
end

-- Raises a decoding error from a public function (which must call this
-- as a statement, not in a `return`): Redis's luaL_error messages point at
-- the caller of the library function, the Lua core's "table index" errors
-- carry no position.
local function raise(err)
  if err == ERR_KEY_NIL or err == ERR_KEY_NAN then error(err, 0) end
  error(err, 3)
end

-- luaL_checklstring for argument 1: a number is turned into a string.
-- Returns the string, or nil and the error message.
local function check_string(name, nargs, s)
  local ts = type(s)
  if ts == "string" then return s end
  if ts == "number" then return tostring(s) end
  return nil, format("bad argument #1 to '%s' (string expected, got %s)",
    name, typename_of(nargs, 1, s))
end

-- luaL_checkinteger / luaL_optinteger: numbers and numeric strings,
-- truncated toward zero like C's cast.  Returns the integer, or nil and
-- the error message.
local function check_integer(name, nargs, index, value, default)
  if default ~= nil and value == nil then return default end
  local x
  if type(value) == "number" then
    x = value
  elseif type(value) == "string" then
    x = tonumber(value)
  end
  if x == nil then
    return nil, format("bad argument #%d to '%s' (number expected, got %s)",
      index, name, typename_of(nargs, index, value))
  end
  if x ~= x then return -TWO63 end -- what x86-64 makes of (int64)NaN
  if x >= 0 then return floor(x) end
  return -floor(-x)
end

-- C's `(int)` of an integer, for the numbers in Redis's messages.
local function as_c_int(x)
  x = x % TWO32
  if x >= 2147483648 then x = x - TWO32 end
  return x
end

-- Shared body of unpack_one and unpack_limit: decode at most `limit`
-- objects (limit 0 with offset 0 means all) from 0-based byte `offset`.
-- Returns out, n with the next offset (or -1 at the end of s) in out[1]
-- and the objects after it -- except for "decode all", where out holds
-- only the objects, as Redis then returns no offset.  On failure returns
-- nil and the error message.
local function unpack_from(s, limit, offset)
  local len = #s
  if offset < 0 or limit < 0 then
    return nil, format("Invalid request to unpack with offset of %d and limit of %d.",
      as_c_int(offset), as_c_int(len))
  elseif offset > len then
    return nil, format("Start offset %d greater than input length %d.",
      as_c_int(offset), as_c_int(len))
  end
  local out = {}
  if limit == 0 and offset == 0 then
    local ok, n = pcall(decode_stream, s, 0, nil, out, 1, 1)
    if not ok then return nil, n end
    return out, n
  end
  local ok, n, pos = pcall(decode_stream, s, offset, limit, out, 2, 1)
  if not ok then return nil, n end
  if 1 + n + 1 > MAX_STACK then return nil, ERR_OFFSET_STACK end
  if pos > len then out[1] = -1 else out[1] = pos - 1 end
  return out, n + 1
end

--- Decode every object in s; returns them as multiple values.
function M.unpack(...)
  local nargs, s = select("#", ...), ...
  local err
  s, err = check_string("unpack", nargs, s)
  if s == nil then error(err, 2) end
  if s == "" then return end
  -- Redis keeps all of unpack's arguments on its stack while decoding.
  local ok, v, pos = pcall(decode, s, 1, nargs)
  if not ok then raise(v) end
  if pos > #s then return v end -- the usual single object
  local out = { v }
  local n
  ok, n = pcall(decode_stream, s, pos - 1, nil, out, 2, nargs + 1)
  if not ok then raise(n) end
  return return_all(out, n + 1)
end

--- Decode one object at 0-based byte `offset` (default 0).
-- Returns next_offset (-1 when s is used up), value.
function M.unpack_one(...)
  local nargs, s, offset = select("#", ...), ...
  local err, out, n
  offset, err = check_integer("unpack_one", nargs, 2, offset, 0)
  if offset == nil then error(err, 2) end
  s, err = check_string("unpack_one", nargs, s)
  if s == nil then error(err, 2) end
  out, n = unpack_from(s, 1, offset)
  if out == nil then raise(n) end
  return return_all(out, n)
end

--- Decode up to `limit` objects from 0-based byte `offset` (default 0).
-- Returns next_offset (-1 when s is used up), values...
function M.unpack_limit(...)
  local nargs, s, limit, offset = select("#", ...), ...
  local err, out, n
  limit, err = check_integer("unpack_limit", nargs, 2, limit, nil)
  if limit == nil then error(err, 2) end
  offset, err = check_integer("unpack_limit", nargs, 3, offset, 0)
  if offset == nil then error(err, 2) end
  s, err = check_string("unpack_limit", nargs, s)
  if s == nil then error(err, 2) end
  out, n = unpack_from(s, limit, offset)
  if out == nil then raise(n) end
  return return_all(out, n)
end

M._NAME = "cmsgpack"
-- The version of Redis's module whose behaviour this file reproduces.
M._VERSION = "lua-cmsgpack 0.4.0"
M._DESCRIPTION = "MessagePack for Lua 5.1 in pure Lua, behaving like Redis's cmsgpack (emqlab)"
M._COPYRIGHT = "emqlab authors; MIT licence"

return M
