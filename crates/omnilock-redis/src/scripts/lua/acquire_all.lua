
local owner, ttl, call = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local parts = #KEYS / 4
for i = 0, parts - 1 do
  local held = redis.call('HMGET', KEYS[i * 4 + 1], 'owner', 'calls')
  if held[1] then
    if held[1] ~= owner or not seen(held[2], call) then return {0} end
  elseif live_head(KEYS[i * 4 + 3], KEYS[i * 4 + 4]) then
    return {0}
  end
end
local answer = {1}
for i = 0, parts - 1 do
  local lock = KEYS[i * 4 + 1]
  if redis.call('HEXISTS', lock, 'owner') == 1 then
    answer[#answer + 1] = tonumber(redis.call('HGET', lock, 'token'))
  else
    local token = next_token(KEYS[i * 4 + 2])
    redis.call('HSET', lock, 'owner', owner, 'holds', 1, 'token', token, 'calls', call)
    redis.call('PEXPIRE', lock, ttl)
    answer[#answer + 1] = tonumber(token)
  end
end
return answer
