-- Shared by every isr script (prepended to each). An item is a hash with
-- the DynamoDB item's attribute names (pk and sk included); numbers are
-- stored as decimal text. KEYS are items of one cache key, all under the
-- same {pk} hash tag.

local COND = 'ConditionalCheckFailed'

-- load returns an item as a table and as HGETALL's flat list (nil and an
-- empty list when the item is absent).
local function load(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    return nil, flat
  end
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t, flat
end

-- num reads a number attribute as the Go side decodes it: DynamoDB's
-- decimal text (exponent within +-400), floored to whole units (for
-- version and the monotonic guard, where floor(x) < n iff x < n for an
-- integer n; times are compared exactly with cmpdec). nil when it is not
-- such a number, so a condition never compares a value the reader would
-- reject.
local function num(s)
  if type(s) ~= 'string' then
    return nil
  end
  local mant, ex = string.match(s, '^(%-?[%d%.]+)(.*)$')
  if not mant then
    return nil
  end
  if not (string.match(mant, '^%-?%d+%.?%d*$') or string.match(mant, '^%-?%.%d+$')) then
    return nil
  end
  if ex ~= '' then
    local e = string.match(ex, '^[eE]([%+%-]?%d+)$')
    if not e then
      return nil
    end
    e = tonumber(e)
    if e == nil or e < -400 or e > 400 then -- maxExponent, as in number.go
      return nil
    end
  end
  local n = tonumber(s)
  if n == nil or n ~= n or n > 9e18 or n < -9e18 then
    return nil
  end
  return math.floor(n)
end

-- dec splits a number text num accepts into its sign (-1, 0, 1), its
-- significant digits without leading or trailing zeros, and the position
-- of the decimal point: the value is sign * 0.digits * 10^point.
local function dec(s)
  local sign = 1
  if string.sub(s, 1, 1) == '-' then
    sign, s = -1, string.sub(s, 2)
  end
  local mant, ex = string.match(s, '^([%d%.]+)[eE]([%+%-]?%d+)$')
  if not mant then
    mant, ex = s, '0'
  end
  local ip, fp = string.match(mant, '^(%d*)%.?(%d*)$')
  local digits = ip .. fp
  local point = #ip + tonumber(ex)
  local lead = #string.match(digits, '^0*')
  digits, point = string.sub(digits, lead + 1), point - lead
  digits = string.match(digits, '^(.-)0*$')
  if digits == '' then
    return 0, '', 0
  end
  return sign, digits, point
end

-- cmpdec compares two number texts num accepts exactly (no rounding to a
-- double): -1, 0 or 1, as the Go side's cmpN.
local function cmpdec(a, b)
  local sa, da, pa = dec(a)
  local sb, db, pb = dec(b)
  if sa ~= sb then
    return sa < sb and -1 or 1
  end
  if sa == 0 then
    return 0
  end
  local c = 0
  if pa ~= pb then
    c = pa < pb and -1 or 1
  else
    local n = math.max(#da, #db)
    da = da .. string.rep('0', n - #da)
    db = db .. string.rep('0', n - #db)
    if da < db then
      c = -1
    elseif da > db then
      c = 1
    end
  end
  return sa * c
end

-- numattr reads a required number attribute: the number, or nil and why not.
local function numattr(item, attr)
  local v = item[attr]
  if v == nil then
    return nil, 'missing'
  end
  local n = num(v)
  if n == nil then
    return nil, 'bad number "' .. v .. '"'
  end
  return n
end

-- put replaces an item whole with the given field/value list.
local function put(key, fields)
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
end

-- expire gives an item the native expiry its ttl attribute asks for, so
-- Redis removes it when the ttl passes, as DynamoDB's TTL deletion would.
-- The ttl is read on the writer's clock (now, the caller's time as decimal
-- text), as every condition is: the key expires ttl - now seconds from
-- the write (at once when that is not positive). An item without a ttl
-- the decoders read gets no expiry (PERSIST).
local function expire(key, now)
  local ttl = redis.call('HGET', key, 'ttl')
  if not ttl or num(ttl) == nil or num(now) == nil then
    redis.call('PERSIST', key)
    return
  end
  local ms = math.ceil((tonumber(ttl) - tonumber(now)) * 1000)
  if ms < 1 then
    ms = 1
  end
  redis.call('PEXPIRE', key, ms)
end

-- leaseok is the condition on LOCK of both publish recipes: it carries
-- token and lease_expires_at > now, compared exactly (now is the caller's
-- time as decimal text).
local function leaseok(key, token, now)
  local lock = load(key)
  if not lock or lock['lease_token'] ~= token then
    return false
  end
  local exp = lock['lease_expires_at']
  return num(exp) ~= nil and cmpdec(exp, now) > 0
end

-- requestok is the condition on a REQ# item that is completed, failed or
-- abandoned: STARTED with the caller's request_hash.
local function requestok(key, hash)
  local r = load(key)
  return r ~= nil and r['status'] == 'STARTED' and r['request_hash'] == hash
end

