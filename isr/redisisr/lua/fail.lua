-- KEYS: REQ#. ARGV: request_hash.
if not requestok(KEYS[1], ARGV[1]) then
  return {'STATE'}
end
redis.call('HSET', KEYS[1], 'status', 'FAILED')
return {'OK'}
