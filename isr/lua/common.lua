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
-- decimal text, floored to whole units. nil when it is not such a number,
-- so a condition never compares a value the reader would reject.
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
  if ex ~= '' and not string.match(ex, '^[eE][%+%-]?%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n == nil or n ~= n or n > 9e18 or n < -9e18 then
    return nil
  end
  return math.floor(n)
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

-- leaseok is the condition on LOCK of both publish recipes: it carries
-- token and lease_expires_at > now.
local function leaseok(key, token, now)
  local lock = load(key)
  if not lock or lock['lease_token'] ~= token then
    return false
  end
  local exp = num(lock['lease_expires_at'])
  return exp ~= nil and exp > now
end

-- requestok is the condition on a REQ# item that is completed, failed or
-- abandoned: STARTED with the caller's request_hash.
local function requestok(key, hash)
  local r = load(key)
  return r ~= nil and r['status'] == 'STARTED' and r['request_hash'] == hash
end

