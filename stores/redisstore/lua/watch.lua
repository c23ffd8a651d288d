-- watch: KEYS[1] record; ARGV: key.
-- Marks a live in-progress record watched (flag +8), so its completion,
-- release or takeover publishes on the change channel. The store calls it
-- after the server confirmed the waiter's subscription: a change before
-- the mark is found by the waiter's next look, a change after it is
-- published to a subscription that exists.
-- Reply: 1 marked (or already), 'O'..owner when marked and the record names
-- its owner (the waiter's store then watches that owner's presence), 0
-- nothing to mark, 'X'..why corrupt.
local k = KEYS[1]
local v, why = get(k)
if v == nil then return 'X' .. why end
if not v or string.byte(v, 3) ~= 80 then return 0 end
local nl, pl, _, owner = check(v, ARGV[1])
if nl == nil then return 'X' .. pl end
if not watched(v) then
  redis.call('SET', k, 'R3P' .. flagchar(bit.bor(flags(v), 8)) .. string.sub(v, 5), 'KEEPTTL')
end
if owner ~= '' then return 'O' .. owner end
return 1
