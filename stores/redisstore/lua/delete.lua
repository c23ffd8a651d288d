-- delete: KEYS[1] record; ARGV: channel.
-- Reply: {code, detail}; 1 (deleting a missing record is not an error).
local k = KEYS[1]
if redis.call('DEL', k) == 1 then
  redis.call('PUBLISH', ARGV[1], 'deleted')
end
return {1, ''}
