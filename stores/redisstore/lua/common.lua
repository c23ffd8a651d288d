-- Shared prelude, prepended to every script of redisstore.
--
-- A record is one hash. Fields: v (encoding version), key, status, nonce,
-- attempt, started_at, heartbeat_at, completed_at, expires_at (Unix ms),
-- payload_hash, and, only when present, result, err_msg, err_type.
-- Every script touches exactly one key, KEYS[1], and publishes on a channel
-- (ARGV[1]) that shares its hash tag.

if redis.replicate_commands then redis.replicate_commands() end

-- num parses an integer field; nil when it is not one. It accepts no form
-- the Go decoder rejects ('1.0', '1e3', '0x10', ' 7'), so a script never
-- writes to a record that reads back as corrupt.
local function num(s)
  if type(s) ~= 'string' or not string.match(s, '^[-+]?%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n == nil or n ~= math.floor(n) or n > 9007199254740991 or n < -9007199254740991 then
    return nil
  end
  return n
end

local function fmt(n)
  return string.format('%.0f', n)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- load returns the raw field list and a map of the record at KEYS[1]:
-- (nil, nil, nil) when there is none, (flat, nil, why) when it cannot be
-- understood, (flat, map, nil) otherwise.
local function load(k)
  local flat = redis.pcall('HGETALL', k)
  if type(flat) == 'table' and flat.err then
    return {}, nil, 'record key does not hold a hash: ' .. flat.err
  end
  if #flat == 0 then
    return nil, nil, nil
  end
  local m = {}
  for i = 1, #flat, 2 do
    m[flat[i]] = flat[i + 1]
  end
  if m.v ~= '1' then
    return flat, nil, 'unsupported record version'
  end
  if m.key == nil or m.key == '' or m.nonce == nil or m.nonce == ''
    or (m.status ~= 'in_progress' and m.status ~= 'completed' and m.status ~= 'failed')
    or (m.status == 'failed' and m.err_msg == nil)
    or (m.err_type ~= nil and m.err_msg == nil)
    or num(m.started_at) == nil or num(m.completed_at) == nil then
    return flat, nil, 'missing or malformed fields'
  end
  m.attempt = num(m.attempt)
  m.heartbeat_at = num(m.heartbeat_at)
  m.expires_at = num(m.expires_at)
  if m.attempt == nil or m.attempt < 1 or m.heartbeat_at == nil or m.expires_at == nil then
    return flat, nil, 'missing or malformed fields'
  end
  return flat, m, nil
end

-- expire sets the native expiry: the record's own expiry plus the buffer,
-- never in the past, so an expired or released record stays readable (and
-- keeps its attempt number) for the buffer.
local function expire(k, expires_at, now, buffer)
  local at = expires_at
  if at < now then at = now end
  redis.call('PEXPIREAT', k, fmt(at + buffer))
end

-- Reply codes shared by the scripts.
local CORRUPT = 3
