
local entry, owner = ARGV[1], ARGV[2]
local weight, capacity = tonumber(ARGV[3]), tonumber(ARGV[4])
local purged = purge(KEYS[1], KEYS[2], KEYS[3])
local mine = redis.call('HGET', KEYS[2], entry)
if mine then
  local state, _, token = parse(mine)
  if state == 'h' then return {1, tonumber(token)} end
  if state == 'r' then return {-3, 0} end
end
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[2], '#capacity', ARGV[4])
else
  local recorded = tonumber(redis.call('HGET', KEYS[2], '#capacity'))
  if recorded and recorded ~= capacity then return {-2, recorded} end
end
local queue = redis.call('LRANGE', KEYS[1], 0, -1)
if not mine then
  if ARGV[7] ~= '1' then
    -- A try: only beside holders, with nobody waiting, if it fits.
    local used = weight
    for _, e in ipairs(queue) do
      local state, w = parse(redis.call('HGET', KEYS[2], e))
      used = used + w
      if state ~= 'h' or used > capacity then return {0, next_change(KEYS[3])} end
    end
  end
  redis.call('RPUSH', KEYS[1], entry)
  redis.call('HSET', KEYS[2], entry, 'w ' .. ARGV[3] .. ' 0 ' .. owner)
  queue[#queue + 1] = entry
end
redis.call('ZADD', KEYS[3], clock() + tonumber(ARGV[6]), entry)
local used = 0
local granted = nil
for _, e in ipairs(queue) do
  local _, w = parse(redis.call('HGET', KEYS[2], e))
  if used + w > capacity then break end
  if e == entry then
    granted = next_token(KEYS[4])
    redis.call('HSET', KEYS[2], entry, 'h ' .. ARGV[3] .. ' ' .. granted .. ' ' .. owner)
    redis.call('ZADD', KEYS[3], clock() + tonumber(ARGV[5]), entry)
    break
  end
  used = used + w
end
if purged then wake_fitting(KEYS[1], KEYS[2], ARGV[8], entry) end
keep(KEYS[1], KEYS[2], KEYS[3])
if granted then return {1, tonumber(granted)} end
return {0, next_change(KEYS[3])}
