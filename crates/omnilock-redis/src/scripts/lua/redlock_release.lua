
local state, token, holds, owner = lock_state(KEYS[1])
requeue(KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5]))
if state ~= 'h' then return -2 end
if owner ~= ARGV[1] or (ARGV[2] ~= '' and token ~= ARGV[2]) then return -1 end
if holds > 1 then
  set_held(KEYS[1], token, holds - 1, owner, math.max(redis.call('PTTL', KEYS[1]), 1))
  return holds - 1
end
pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[3])
return 0
