-- KEYS: LOCK. ARGV: token.
if redis.call('HGET', KEYS[1], 'lease_token') ~= ARGV[1] then
  return {'LOST'}
end
redis.call('DEL', KEYS[1])
return {'OK'}
