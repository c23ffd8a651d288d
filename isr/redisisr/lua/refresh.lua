-- KEYS: LOCK. ARGV: token, now, lease_expires_at, ttl.
if not leaseok(KEYS[1], ARGV[1], ARGV[2]) then
  return {'LOST'}
end
redis.call('HSET', KEYS[1], 'lease_expires_at', ARGV[3], 'ttl', ARGV[4])
expire(KEYS[1], ARGV[2])
return {'OK', redis.call('HGETALL', KEYS[1])}
