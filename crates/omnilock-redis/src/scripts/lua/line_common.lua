
-- The head of the line that still has a place: entry, ticket, place expiry.
local function first_live(line, places)
  while true do
    local head = redis.call('ZRANGE', line, 0, 0, 'WITHSCORES')
    if #head == 0 then return false, nil, nil end
    local expiry = redis.call('ZSCORE', places, head[1])
    if expiry and tonumber(expiry) > clock() then
      return head[1], tonumber(head[2]), tonumber(expiry)
    end
    redis.call('ZREM', line, head[1])
    redis.call('ZREM', places, head[1])
  end
end
-- The lock: 'h', token, holds, owner while held; '~', ticket, entry while
-- kept for a waiter; nil when free.
local function lock_state(lock)
  local value = redis.call('GET', lock)
  if not value then return nil end
  local token, holds, owner = string.match(value, '^h (%d+) (%d+) (.*)$')
  if token then return 'h', token, tonumber(holds), owner end
  local ticket, entry = string.match(value, '^~ (%d+) (.*)$')
  return '~', ticket, entry
end
local function set_held(lock, token, holds, owner, ttl)
  redis.call('SET', lock, 'h ' .. token .. ' ' .. string.format('%d', holds) .. ' ' .. owner,
    'PX', ttl)
end
-- Frees the lock: kept for the first live waiter (and that waiter woken)
-- while its place lasts, deleted when nobody waits.
local function pass_on(lock, line, places, channel_prefix)
  local head, ticket, expiry = first_live(line, places)
  if head then
    redis.call('SET', lock, '~ ' .. string.format('%d', ticket) .. ' ' .. head,
      'PX', expiry - clock())
    notify(channel_prefix, head)
  else
    redis.call('DEL', lock)
  end
end
-- Whether (ticket, entry) comes before (t, e): the zset's order, with equal
-- tickets in byte order of the entries (Lua's `<` on strings follows the
-- server's locale).
local function before(ticket, entry, t, e)
  if ticket ~= t then return ticket < t end
  for i = 1, math.min(#entry, #e) do
    local x, y = string.byte(entry, i), string.byte(e, i)
    if x ~= y then return x < y end
  end
  return #entry < #e
end
local function requeue(line, places, entry, ticket)
  if entry ~= '' and ticket and redis.call('ZSCORE', places, entry) then
    redis.call('ZADD', line, ticket, entry)
  end
end
