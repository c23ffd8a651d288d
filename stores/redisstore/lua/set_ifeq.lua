-- SET KEYS[1] ARGV[2] IFEQ ARGV[1] PXAT ARGV[3], for a server whose SET has
-- no IFEQ (Redis before 8.4, Valkey before 8.1): the conditional completion
-- of a fresh claim (see ifeq.go). It writes the record the client built
-- only when the key holds exactly the claim's value, and answers as the
-- native command does: OK when it wrote, nil when it did not (the key holds
-- anything else, or another type, which the complete script then reports).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
end
return false
