
-- The clock is read only when a queue needs it: the uncontended path
-- stays as short as SET NX.
local now, now_us = nil, nil
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end
local function live_head(queue, timeouts)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then return false end
    local expiry = redis.call('ZSCORE', timeouts, head)
    if expiry and tonumber(expiry) > clock() then return head end
    redis.call('LPOP', queue)
    redis.call('ZREM', timeouts, head)
  end
end
-- The ids of the last calls that changed a lock (space-separated, newest
-- last, at most 8): a call that runs twice (a client library re-sending
-- after a dropped connection, or omnilock retrying a release whose reply
-- was lost) finds its id and changes nothing the second time.
local function seen(calls, id)
  return id ~= '' and calls ~= nil and calls ~= false
    and string.find(' ' .. calls .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end
local function remember(calls, id)
  local list = {}
  if calls then
    for c in string.gmatch(calls, '%S+') do list[#list + 1] = c end
  end
  if id ~= '' then list[#list + 1] = id end
  while #list > 8 do table.remove(list, 1) end
  return table.concat(list, ' ')
end
-- A channel prefix that starts with the lock's hash tag is a channel in the
-- lock's slot (a cluster): sharded pub/sub, to that slot's master only.
-- pcall: the lock has changed by now, and a publish refused (an ACL user
-- without the channel) must not turn a done release into an error; the
-- waiter's re-check finds the lock free.
local function notify(channel_prefix, entry)
  local client = string.match(entry, '^([^:]+):')
  local publish = 'PUBLISH'
  if string.sub(channel_prefix, 1, 1) == '{' then publish = 'SPUBLISH' end
  redis.pcall(publish, channel_prefix .. client, entry)
end
-- One server (not a cluster, whose channel prefix starts with the lock's
-- hash tag): the head may be blocked in BLPOP on its own list, with its
-- next attempt queued right behind on the same connection. A push
-- unblocks it, and the server runs that attempt at once. Kept a minute
-- for a waiter that is between two waits; its next attempt deletes it.
local function wake(queue, timeouts, channel_prefix)
  local head = live_head(queue, timeouts)
  if not head then return end
  notify(channel_prefix, head)
  if string.sub(channel_prefix, 1, 1) ~= '{' then
    local list = queue .. ':' .. head
    redis.call('LPUSH', list, '1')
    redis.call('PEXPIRE', list, 60000)
  end
end
-- The next fencing token, as a string. It never goes below the server's
-- clock in microseconds, so it keeps rising when the fence counter is lost
-- (a restart without persistence, a failover to a lagging replica).
-- Formatted with %d: Lua would print a number this large in exponent form.
local function next_token(fence)
  local token = redis.call('INCR', fence)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token <= floor then
    token = floor + 1
    -- Kept a day: a name used once (a job id) leaves no key behind for
    -- good. Once it is gone, the clock floor keeps tokens rising.
    redis.call('SET', fence, string.format('%d', token), 'PX', 86400000)
  end
  return string.format('%d', token)
end
