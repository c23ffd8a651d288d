-- Shared prelude, prepended to every script of redisstore.
--
-- A record is one string value: a fixed-width ASCII header of 122 bytes
-- followed by the variable parts. 1-based offsets:
--   1-2    'R3'  magic and encoding version
--   3      status: P in_progress, C completed, F failed
--   4      flags, a hex digit: +1 has result, +2 has
--          error, +4 relative times (a fresh claim written by SET NX PX from
--          the client: expires_at holds the lease, completed_at the
--          retention, heartbeat_at and started_at 0; the key's PEXPIRETIME,
--          set by the server's clock, is expiry + retention. get() makes
--          such a record absolute.), +8 watched (a waiter subscribed to the
--          change channel: a completion, release or takeover publishes)
-- Native expiry: a completed or failed record expires at its expires_at
-- exactly (so one that is present is live); an in-progress record
-- (released ones too) a retention later.
--   5-17   expires_at      18-30  heartbeat_at   31-43  started_at
--   44-56  completed_at    57-69  attempt        70-82  takeover_ms
--   83-87  nonce length    88-92  payload hash length   93-97 key length
--   98-107 result length   108-117 error message length 118-122 error type length
--   123-   nonce, payload hash, key, result, error message, error type,
--          then, for a claim that names its owner, the owner's length (5
--          digits, not 0) and the owner (records without one end before)
-- Numbers are zero-padded decimal (times in Unix ms). Every script touches
-- exactly one key, KEYS[1], and publishes on a channel (ARGV[1]) that shares
-- its hash tag. A script writes only to a record that passes check(), the
-- same rules the Go decoder applies, so it never overwrites a record that
-- does not decode.

-- PAT: magic, status, flags, then 118 digits (a literal, so a call does
-- not build it again).
local PAT = '^R3[PCF][0-9a-f]%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(v, a, b)
  return tonumber(string.sub(v, a, b))
end

local function fmt(n)
  return string.format('%013.0f', n)
end

-- flags returns the flags of a record whose header matched PAT (or whose
-- fourth byte is anything: a byte that is no flag gives 16).
local function flags(v)
  local b = string.byte(v, 4) or 0
  if b >= 48 and b <= 57 then return b - 48 end
  if b >= 97 and b <= 102 then return b - 87 end
  return 16
end

local HEX = '0123456789abcdef'
local function flagchar(f)
  return string.sub(HEX, f + 1, f + 1)
end

local function watched(v)
  return bit.band(flags(v), 8) ~= 0
end

-- check returns the nonce, payload hash and key lengths and the owner ('' for
-- none) of a valid record for key, or nil and why it is not one.
local function check(v, key)
  if not string.find(v, PAT) then
    return nil, 'malformed record header'
  end
  local nl, pl, kl = num(v, 83, 87), num(v, 88, 92), num(v, 93, 97)
  local rl, ml, tl = num(v, 98, 107), num(v, 108, 117), num(v, 118, 122)
  local at = 122 + nl + pl + kl + rl + ml + tl
  local owner = ''
  if at ~= #v then
    if at + 5 >= #v or not string.find(v, '^%d%d%d%d%d', at + 1)
      or num(v, at + 1, at + 5) ~= #v - at - 5 then
      return nil, 'record length does not match its header'
    end
    owner = string.sub(v, at + 6)
  end
  local f = flags(v)
  if f > 15 then
    return nil, 'malformed record header'
  end
  if bit.band(f, 4) ~= 0 then
    return nil, 'relative times on a record that is not a fresh claim'
  end
  local res, err = bit.band(f, 1) ~= 0, bit.band(f, 2) ~= 0
  if nl == 0 or kl == 0 or num(v, 57, 69) < 1 or num(v, 57, 69) >= 9999999999999
    or (not res and rl > 0) or (not err and (ml > 0 or tl > 0))
    or (not err and string.byte(v, 3) == 70) then
    return nil, 'inconsistent record fields'
  end
  if string.sub(v, 123 + nl + pl, 122 + nl + pl + kl) ~= key then
    return nil, 'record holds another key'
  end
  return nl, pl, kl, owner
end

-- get reads KEYS[1]: the value, false when there is none, or nil and why
-- the key holds something else. A fresh claim's relative times are made
-- absolute from the key's expiry (one that cannot be is left for check()
-- to refuse).
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, 'record key does not hold a string: ' .. tostring(v.err)
  end
  if v and string.byte(v, 3) == 80 and bit.band(flags(v), 4) ~= 0 and flags(v) < 16
    and string.find(v, PAT) and num(v, 18, 43) == 0 then
    local pet = redis.call('PEXPIRETIME', k)
    if pet >= 0 then
      local e = pet - num(v, 44, 56)
      local st = fmt(e - num(v, 5, 17))
      v = string.sub(v, 1, 3) .. flagchar(flags(v) - 4) .. fmt(e) .. st .. st .. fmt(0)
        .. string.sub(v, 57)
    end
  end
  return v
end
