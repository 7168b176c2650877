--[[
  cjson.lua -- emqlab's pure-Lua JSON module with the behaviour of the cjson module Redis 7 embeds
  (lua-cjson 2.1.0 as Redis configures it), for the client-side Lua host (emqlab/scripting/host.py).

  Written for emqlab from the observable behaviour of a Redis 7.0 server (every rule below is pinned
  against the live server's cjson in tests/test_host_differential.py):

  * numbers are written with encode_number_precision significant digits ('%.14g'); NaN and +/-Inf
    are refused ("Cannot serialise number: must not be NaN or Inf") unless encode_invalid_numbers
    is on (written nan, inf, -inf, whatever the sign of the NaN) or 'null' (written null);
  * a table whose keys are all positive integers is an array (holes become null) unless it is
    "excessively sparse": max index > ratio * count and max index > safe (defaults 2 and 10), which
    is an error; an empty table is an object; any other key makes an object, number keys written as
    strings; other key types are refused;
  * strings escape '"', '\', '/', the control characters and DEL; other bytes pass unchanged;
  * nesting deeper than encode_max_depth / decode_max_depth (1000) is an error;
  * decoding follows lua-cjson's tokenizer, including its error messages ("Expected value but found
    T_END at character 1"), its number syntax (strtod: hex, inf, nan, leading zeros and '+' accepted)
    and its treatment of NUL bytes;
  * the configuration functions return the current settings and change them for every later use of
    this module instance (as on the server, where they persist across scripts); new() returns an
    instance with the defaults.

  Loaded by the host with the sentinel `null` (a userdata) as its only argument.
]]

local null = ...
local type, tostring, tonumber, select, error, pcall = type, tostring, tonumber, select, error, pcall
local next, rawget, rawset = next, rawget, rawset
local floor, huge = math.floor, math.huge
local byte, char, sub, format, find, gsub, lower = string.byte, string.char, string.sub, string.format,
  string.find, string.gsub, string.lower
local concat = table.concat

local ESCAPES = {}
for i = 0, 31 do ESCAPES[char(i)] = format('\\u%04x', i) end
ESCAPES['\b'], ESCAPES['\f'], ESCAPES['\n'], ESCAPES['\r'], ESCAPES['\t'] = '\\b', '\\f', '\\n', '\\r', '\\t'
ESCAPES['"'], ESCAPES['\\'], ESCAPES['/'], ESCAPES['\127'] = '\\"', '\\\\', '\\/', '\\u007f'

local function quote(s)
  return '"' .. gsub(s, '[%z\1-\31"\\/\127]', ESCAPES) .. '"'
end

local function is_invalid_number(x)
  return x ~= x or x == huge or x == -huge
end

local getinfo = debug and debug.getinfo
local function bad_argument(msg)
  -- named as the caller named the function ('?' through pcall), as luaL_argerror does
  local info = getinfo and getinfo(2, 'n')
  error(format("bad argument #1 to '%s' (%s)", info and info.name or '?', msg), 3)
end

local function new_instance()
  local cfg = {
    sparse_convert = false, sparse_ratio = 2, sparse_safe = 10,
    encode_depth = 1000, decode_depth = 1000, precision = 14,
    keep_buffer = true, encode_invalid = false, decode_invalid = true,
  }
  local M = {}

  -- encoding ------------------------------------------------------------------------------------
  local function number_text(x)
    if is_invalid_number(x) then
      local mode = cfg.encode_invalid
      if mode == 'null' then return 'null' end
      if not mode then error({cjson = 'Cannot serialise number: must not be NaN or Inf'}) end
      return x ~= x and 'nan' or (x > 0 and 'inf' or '-inf')
    end
    return format('%.' .. cfg.precision .. 'g', x)
  end

  local encode_value

  local function array_length(t)
    local max, items = 0, 0
    for k in next, t do
      if type(k) == 'number' and k > 0 and floor(k) == k then
        -- the maximum is a C int there: a key past its range stores INT_MIN
        if k > max then max = k < 2147483648 and k or -2147483648 end
        items = items + 1
      else
        return -1
      end
    end
    if cfg.sparse_ratio > 0 and max > items * cfg.sparse_ratio and max > cfg.sparse_safe then
      if not cfg.sparse_convert then
        error({cjson = 'Cannot serialise table: excessively sparse array'})
      end
      return -1
    end
    return max
  end

  local function encode_table(t, depth, out)
    depth = depth + 1
    if depth > cfg.encode_depth then
      error({cjson = format('Cannot serialise, excessive nesting (%d)', depth)})
    end
    local n = array_length(t)
    if n > 0 then
      out[#out + 1] = '['
      for i = 1, n do
        if i > 1 then out[#out + 1] = ',' end
        encode_value(rawget(t, i), depth, out)
      end
      out[#out + 1] = ']'
      return
    end
    out[#out + 1] = '{'
    local first = true
    for k, v in next, t do
      if not first then out[#out + 1] = ',' end
      first = false
      local kt = type(k)
      if kt == 'string' then
        out[#out + 1] = quote(k)
      elseif kt == 'number' then
        out[#out + 1] = '"' .. number_text(k) .. '"'
      else
        error({cjson = 'Cannot serialise ' .. kt .. ': table key must be a number or string'})
      end
      out[#out + 1] = ':'
      encode_value(v, depth, out)
    end
    out[#out + 1] = '}'
  end

  encode_value = function(v, depth, out)
    local t = type(v)
    if t == 'string' then
      out[#out + 1] = quote(v)
    elseif t == 'number' then
      out[#out + 1] = number_text(v)
    elseif t == 'boolean' then
      out[#out + 1] = v and 'true' or 'false'
    elseif t == 'nil' or v == null then
      out[#out + 1] = 'null'
    elseif t == 'table' then
      encode_table(v, depth, out)
    else
      error({cjson = 'Cannot serialise ' .. t .. ': type not supported'})
    end
  end

  local function unwrap(ok, result)
    if ok then return result end
    if type(result) == 'table' and result.cjson then error(result.cjson, 3) end
    error(result, 0)
  end

  function M.encode(...)
    if select('#', ...) ~= 1 then bad_argument('expected 1 argument') end
    local v = ...
    local out = {}
    return unwrap(pcall(function() encode_value(v, 0, out) return concat(out) end))
  end

  -- decoding ------------------------------------------------------------------------------------
  -- token kinds, named as lua-cjson names them in its messages
  local T_OBJ_BEGIN, T_OBJ_END, T_ARR_BEGIN, T_ARR_END = 'T_OBJ_BEGIN', 'T_OBJ_END', 'T_ARR_BEGIN', 'T_ARR_END'
  local T_STRING, T_NUMBER, T_BOOLEAN, T_NULL = 'T_STRING', 'T_NUMBER', 'T_BOOLEAN', 'T_NULL'
  local T_COLON, T_COMMA, T_END, T_ERROR = 'T_COLON', 'T_COMMA', 'T_END', 'T_ERROR'
  local SINGLE = {['{'] = T_OBJ_BEGIN, ['}'] = T_OBJ_END, ['['] = T_ARR_BEGIN, [']'] = T_ARR_END,
                  [':'] = T_COLON, [','] = T_COMMA}
  local SIMPLE_ESCAPES = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n',
                          r = '\r', t = '\t'}

  local function utf8(cp)
    if cp < 0x80 then return char(cp) end
    if cp < 0x800 then return char(0xC0 + floor(cp / 0x40), 0x80 + cp % 0x40) end
    if cp < 0x10000 then
      return char(0xE0 + floor(cp / 0x1000), 0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
    end
    return char(0xF0 + floor(cp / 0x40000), 0x80 + floor(cp / 0x1000) % 0x40,
                0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end

  -- the longest prefix of s at i that C's strtod accepts, or nil
  local function strtod_prefix(s, i)
    local j = i
    local c = sub(s, j, j)
    if c == '+' or c == '-' then j = j + 1 end
    local rest = lower(sub(s, j, j + 7))
    if sub(rest, 1, 8) == 'infinity' then return sub(s, i, j + 7) end
    if sub(rest, 1, 3) == 'inf' then return sub(s, i, j + 2) end
    if sub(rest, 1, 3) == 'nan' then
      local k = j + 3
      local _, e = find(s, '^%([%w_]*%)', k)
      if e then k = e + 1 end
      return sub(s, i, k - 1)
    end
    local _, e
    if sub(rest, 1, 2) == '0x' and find(s, '^%.?%x', j + 2) then
      _, e = find(s, '^%x*', j + 2)
      local k = e + 1
      if sub(s, k, k) == '.' then _, e = find(s, '^%x*', k + 1) end
      local _, pe = find(s, '^[pP][+-]?%d+', e + 1)
      return sub(s, i, pe or e)
    end
    local _, d1 = find(s, '^%d*', j)
    local k = d1 + 1
    local digits = d1 >= j
    if sub(s, k, k) == '.' then
      local _, d2 = find(s, '^%d*', k + 1)
      digits = digits or d2 > k
      k = d2 + 1
    end
    if not digits then return nil end
    local _, ee = find(s, '^[eE][+-]?%d+', k)
    return sub(s, i, (ee or k - 1))
  end

  local function invalid_number_syntax(s, i)
    local c = sub(s, i, i)
    if c == '+' then return true end
    local j = i
    if c == '-' then j = j + 1 end
    local d = sub(s, j, j)
    if d == '0' then
      local d2 = sub(s, j + 1, j + 1)
      return d2 == 'x' or d2 == 'X' or find(d2, '^%d') ~= nil
    elseif d ~= '' and byte(d) <= 57 then
      return false
    end
    local w = lower(sub(s, j, j + 2))
    return w == 'inf' or w == 'nan'
  end

  -- next token of s at i: kind, value-or-message, start (1-based, as reported), next position
  local function next_token(s, i, n)
    while true do
      local c = sub(s, i, i)
      if c == ' ' or c == '\t' or c == '\n' or c == '\r' then i = i + 1 else break end
    end
    if i > n or byte(s, i) == 0 then return T_END, nil, i, i end
    local c = sub(s, i, i)
    local single = SINGLE[c]
    if single then return single, nil, i, i + 1 end
    if c == '"' then
      local parts, j = {}, i + 1
      while true do
        local k = find(s, '[%z"\\]', j)
        if k == nil then return T_ERROR, 'unexpected end of string', n + 1, n + 1 end
        parts[#parts + 1] = sub(s, j, k - 1)
        local ch = sub(s, k, k)
        if ch == '"' then return T_STRING, concat(parts), i, k + 1 end
        if ch == '\0' then return T_ERROR, 'unexpected end of string', k, k end
        local e = sub(s, k + 1, k + 1)
        local simple = SIMPLE_ESCAPES[e]
        if simple then
          parts[#parts + 1] = simple
          j = k + 2
        elseif e == 'u' then
          local hex = sub(s, k + 2, k + 5)
          if not find(hex, '^%x%x%x%x$') then return T_ERROR, 'invalid unicode escape code', k, k end
          local cp = tonumber(hex, 16)
          j = k + 6
          if cp >= 0xDC00 and cp <= 0xDFFF then return T_ERROR, 'invalid unicode escape code', k, k end
          if cp >= 0xD800 and cp <= 0xDBFF then
            local low = sub(s, j, j + 5)
            if not find(low, '^\\u%x%x%x%x$') then return T_ERROR, 'invalid unicode escape code', k, k end
            local lo = tonumber(sub(low, 3), 16)
            if lo < 0xDC00 or lo > 0xDFFF then return T_ERROR, 'invalid unicode escape code', k, k end
            cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
            j = j + 6
          end
          parts[#parts + 1] = utf8(cp)
        else
          return T_ERROR, 'invalid escape code', k, k
        end
      end
    end
    if c == '-' or find(c, '^%d') then
      if not cfg.decode_invalid and invalid_number_syntax(s, i) then
        return T_ERROR, 'invalid number', i, i
      end
      local text = strtod_prefix(s, i)
      if text == nil then return T_ERROR, 'invalid number', i, i end
      return T_NUMBER, tonumber(text), i, i + #text
    end
    if sub(s, i, i + 3) == 'true' then return T_BOOLEAN, true, i, i + 4 end
    if sub(s, i, i + 4) == 'false' then return T_BOOLEAN, false, i, i + 5 end
    if sub(s, i, i + 3) == 'null' then return T_NULL, null, i, i + 4 end
    if cfg.decode_invalid and invalid_number_syntax(s, i) then
      local text = strtod_prefix(s, i)
      if text == nil then return T_ERROR, 'invalid number', i, i end
      return T_NUMBER, tonumber(text), i, i + #text
    end
    return T_ERROR, 'invalid token', i, i
  end

  local function fail(expected, kind, value, at)
    local found = kind == T_ERROR and value or kind
    error({cjson = format('Expected %s but found %s at character %d', expected, found, at)})
  end

  local parse_value

  local function parse_container(s, n, kind, at, pos, depth)
    depth = depth + 1
    if depth > cfg.decode_depth then
      error({cjson = format('Found too many nested data structures (%d) at character %d', depth, at)})
    end
    local t = {}
    if kind == T_ARR_BEGIN then
      local k, v, a, p = next_token(s, pos, n)
      if k == T_ARR_END then return t, p end
      local i = 1
      while true do
        local value
        value, p = parse_value(s, n, k, v, a, p, depth, 'value')
        rawset(t, i, value)
        i = i + 1
        k, v, a, p = next_token(s, p, n)
        if k == T_ARR_END then return t, p end
        if k ~= T_COMMA then fail('comma or array end', k, v, a) end
        k, v, a, p = next_token(s, p, n)
      end
    end
    local k, v, a, p = next_token(s, pos, n)
    if k == T_OBJ_END then return t, p end
    while true do
      if k ~= T_STRING then fail('object key string', k, v, a) end
      local key = v
      k, v, a, p = next_token(s, p, n)
      if k ~= T_COLON then fail('colon', k, v, a) end
      k, v, a, p = next_token(s, p, n)
      local value
      value, p = parse_value(s, n, k, v, a, p, depth, 'value')
      rawset(t, key, value)
      k, v, a, p = next_token(s, p, n)
      if k == T_OBJ_END then return t, p end
      if k ~= T_COMMA then fail('comma or object end', k, v, a) end
      k, v, a, p = next_token(s, p, n)
    end
  end

  parse_value = function(s, n, kind, value, at, pos, depth, expected)
    if kind == T_STRING or kind == T_NUMBER or kind == T_BOOLEAN or kind == T_NULL then
      return value, pos
    end
    if kind == T_OBJ_BEGIN or kind == T_ARR_BEGIN then
      return parse_container(s, n, kind, at, pos, depth)
    end
    fail(expected, kind, value, at)
  end

  function M.decode(...)
    if select('#', ...) ~= 1 then bad_argument('expected 1 argument') end
    local s = ...
    local ts = type(s)
    if ts == 'number' then
      s = tostring(s)
    elseif ts ~= 'string' then
      bad_argument('string expected, got ' .. ts)
    end
    return unwrap(pcall(function()
      local n = #s
      if n >= 2 and (byte(s, 1) == 0 or byte(s, 2) == 0) then
        error({cjson = 'JSON parser does not support UTF-16 or UTF-32'})
      end
      local k, v, a, p = next_token(s, 1, n)
      local value
      value, p = parse_value(s, n, k, v, a, p, 0, 'value')
      k, v, a = next_token(s, p, n)
      if k ~= T_END then fail('the end', k, v, a) end
      return value
    end))
  end

  -- configuration ---------------------------------------------------------------------------------
  local function config_int(name, field, lo, hi)
    M[name] = function(...)
      local nargs = select('#', ...)
      if nargs > 1 then error(format("bad argument #2 to '%s' (found too many arguments)", name), 2) end
      local v = ...
      if v ~= nil then
        local x = tonumber(v)
        if x == nil or x < lo or x > hi then
          error(format("bad argument #1 to '%s' (expected integer between %d and %d)", name, lo, hi), 2)
        end
        cfg[field] = floor(x)
      end
      return cfg[field]
    end
  end
  config_int('encode_max_depth', 'encode_depth', 1, 2147483647)
  config_int('decode_max_depth', 'decode_depth', 1, 2147483647)
  config_int('encode_number_precision', 'precision', 1, 14)

  local function config_bool(name, field, null_option)
    M[name] = function(...)
      if select('#', ...) > 0 then
        local v = ...
        if v == 'on' or v == true then cfg[field] = true
        elseif v == 'off' or v == false then cfg[field] = false
        elseif null_option and v == 'null' then cfg[field] = 'null'
        else bad_argument(format("invalid option '%s'", tostring(v))) end
      end
      return cfg[field]
    end
  end
  config_bool('encode_keep_buffer', 'keep_buffer')
  config_bool('encode_invalid_numbers', 'encode_invalid', true)
  config_bool('decode_invalid_numbers', 'decode_invalid')

  function M.encode_sparse_array(convert, ratio, safe)
    if convert ~= nil then cfg.sparse_convert = convert and true or false end
    if ratio ~= nil then cfg.sparse_ratio = floor(tonumber(ratio) or cfg.sparse_ratio) end
    if safe ~= nil then cfg.sparse_safe = floor(tonumber(safe) or cfg.sparse_safe) end
    return cfg.sparse_convert, cfg.sparse_ratio, cfg.sparse_safe
  end

  M.new = new_instance
  M.null = null
  M._NAME = 'cjson'
  M._VERSION = '2.1.0'
  return M
end

return new_instance()
