-- delete: KEYS[1] record; ARGV: channel.
-- Reply: 1 (deleting a missing record is not an error).
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'd')
end
return 1
