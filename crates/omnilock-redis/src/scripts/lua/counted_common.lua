
local function parse(info)
  local state, weight, token, owner = string.match(info, '^(%a) (%d+) (%d+) (.*)$')
  return state, tonumber(weight), token, owner
end
-- Drops entries whose time ran out. True when one in the queue went.
local function purge(order, entries, expiry)
  local gone = false
  for _, e in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', clock())) do
    redis.call('ZREM', expiry, e)
    redis.call('HDEL', entries, e)
    if redis.call('LREM', order, 1, e) > 0 then gone = true end
  end
  return gone
end
-- Wakes every waiter that fits now (but `except`): each claims its grant.
local function wake_fitting(order, entries, channel_prefix, except)
  local capacity = tonumber(redis.call('HGET', entries, '#capacity'))
  if not capacity then return end
  local used = 0
  for _, e in ipairs(redis.call('LRANGE', order, 0, -1)) do
    local state, weight = parse(redis.call('HGET', entries, e))
    if used + weight > capacity then return end
    if state == 'w' and e ~= except then notify(channel_prefix, e) end
    used = used + weight
  end
end
-- The keys live as long as their longest-lived entry.
local function keep(order, entries, expiry)
  local last = redis.call('ZRANGE', expiry, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', order, entries, expiry)
    return
  end
  local ms = math.max(tonumber(last[2]) - clock(), 1) + 1000
  redis.call('PEXPIRE', order, ms)
  redis.call('PEXPIRE', entries, ms)
  redis.call('PEXPIRE', expiry, ms)
end
-- Milliseconds until the next entry's time runs out: when to look again.
local function next_change(expiry)
  local first = redis.call('ZRANGE', expiry, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return math.max(tonumber(first[2]) - clock(), 1)
end
