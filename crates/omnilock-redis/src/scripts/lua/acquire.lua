
local call = ARGV[7] or ''
local function leave()
  if ARGV[4] ~= '' and redis.call('ZREM', KEYS[4], ARGV[4]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[4])
    redis.call('DEL', KEYS[3] .. ':' .. ARGV[4])
  end
end
local ttl = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local token = next_token(KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', 1, 'token', token, 'calls', call)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(token)}
end
local held = redis.call('HMGET', KEYS[1], 'owner', 'calls')
local owner = held[1]
if owner == ARGV[1] then
  if seen(held[2], call) then
    leave()
    return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
  end
  if ARGV[3] ~= '1' then return {-1, 0} end
  redis.call('HINCRBY', KEYS[1], 'holds', 1)
  redis.call('HSET', KEYS[1], 'calls', remember(held[2], call))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  leave()
  return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
end
local head = live_head(KEYS[3], KEYS[4])
if not owner and (not head or head == ARGV[4]) then
  -- An empty queue holds no entry of ours: nothing to leave.
  local waiting = 0
  if head then
    leave()
    waiting = redis.call('EXISTS', KEYS[3])
  end
  local token = next_token(KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', 1, 'token', token, 'calls', call,
    'waiting', waiting)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(token)}
end
if ARGV[4] ~= '' then
  local lease = tonumber(ARGV[5])
  if owner then redis.call('HSET', KEYS[1], 'waiting', 1) end
  if not redis.call('ZSCORE', KEYS[4], ARGV[4]) then
    redis.call('RPUSH', KEYS[3], ARGV[4])
  end
  redis.call('ZADD', KEYS[4], clock() + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[3], lease * 2)
  redis.call('PEXPIRE', KEYS[4], lease * 2)
end
return {0, redis.call('PTTL', KEYS[1])}
