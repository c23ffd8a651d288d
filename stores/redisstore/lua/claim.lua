-- claim: KEYS[1] record; ARGV: channel, storage key, nonce, payload hash,
-- lease ms, takeover ms, buffer ms.
-- Reply: {code, detail, fields}; code 0 existing, 1 claimed, 2 took over,
-- 3 corrupt (detail says why, fields are the raw hash).
local k = KEYS[1]
local channel, skey, nonce, phash = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lease, takeover, buffer = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()
local flat, cur, why = load(k)
if why then
  return {CORRUPT, why, flat}
end
if cur ~= nil and cur.key ~= skey then
  return {CORRUPT, 'record holds another key', flat}
end

if cur == nil or cur.expires_at <= now then
  local attempt = 1
  if cur ~= nil then attempt = cur.attempt + 1 end
  local exp = now + lease
  local rec = {'v', '1', 'key', skey, 'status', 'in_progress',
    'payload_hash', phash, 'nonce', nonce, 'attempt', fmt(attempt),
    'started_at', fmt(now), 'heartbeat_at', fmt(now), 'completed_at', '0',
    'expires_at', fmt(exp)}
  if cur ~= nil then redis.call('DEL', k) end
  redis.call('HSET', k, unpack(rec))
  expire(k, exp, now, buffer)
  return {1, '', rec}
end

if cur.nonce == nonce then
  return {1, '', flat}
end

if cur.status == 'in_progress' and (cur.payload_hash or '') == phash
  and now - cur.heartbeat_at >= takeover then
  local exp = cur.expires_at
  if now + lease > exp then exp = now + lease end
  redis.call('HSET', k, 'nonce', nonce, 'attempt', fmt(cur.attempt + 1),
    'started_at', fmt(now), 'heartbeat_at', fmt(now), 'expires_at', fmt(exp))
  expire(k, exp, now, buffer)
  redis.call('PUBLISH', channel, 'took_over')
  return {2, '', redis.call('HGETALL', k)}
end

return {0, '', flat}
