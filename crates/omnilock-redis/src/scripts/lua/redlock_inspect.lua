-- One Redlock node's view of a lock, changing nothing. KEYS: lock, line,
-- places. Answers the lock key's value ('' when absent) and PTTL, then
-- each waiter in line whose place is live: entry, ticket (line order).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {redis.call('GET', KEYS[1]) or '', tostring(redis.call('PTTL', KEYS[1]))}
local line = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #line, 2 do
  local expiry = redis.call('ZSCORE', KEYS[3], line[i])
  if expiry and tonumber(expiry) > now then
    out[#out + 1] = line[i]
    out[#out + 1] = line[i + 1]
  end
end
return out
