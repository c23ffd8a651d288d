-- KEYS: REQ#. ARGV: pk, sk, request_hash, now, ttl, retry failed ('1').
local cur, flat = load(KEYS[1])
local live = cur ~= nil
if cur and cur['ttl'] then
  local t = num(cur['ttl'])
  if t ~= nil and cmpdec(cur['ttl'], ARGV[4]) <= 0 then
    live = false -- past its ttl: counts as absent
  end
end
if live and not (ARGV[6] == '1' and cur['status'] == 'FAILED' and cur['request_hash'] == ARGV[3]) then
  return {'EXISTS', flat}
end
put(KEYS[1], {'pk', ARGV[1], 'sk', ARGV[2], 'request_hash', ARGV[3], 'status', 'STARTED', 'ttl', ARGV[5]})
expire(KEYS[1], ARGV[4])
return {'OK'}
