-- KEYS: REQ#. ARGV: request_hash.
if not requestok(KEYS[1], ARGV[1]) then
  return {'STATE'}
end
redis.call('DEL', KEYS[1])
return {'OK'}
