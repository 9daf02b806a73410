
local call = ARGV[4] or ''
local held = redis.call('HMGET', KEYS[1], 'owner', 'token', 'calls', 'holds', 'waiting')
if held[1] ~= ARGV[1] or (ARGV[2] ~= '' and held[2] ~= ARGV[2]) then
  return -1
end
if seen(held[3], call) then
  return tonumber(held[4])
end
-- The last hold (the usual case) frees the lock without counting down.
local holds = 0
if tonumber(held[4]) > 1 then holds = redis.call('HINCRBY', KEYS[1], 'holds', -1) end
if holds > 0 then
  redis.call('HSET', KEYS[1], 'calls', remember(held[3], call))
  return holds
end
redis.call('DEL', KEYS[1])
if held[5] == '1' then wake(KEYS[2], KEYS[3], ARGV[3]) end
return 0
