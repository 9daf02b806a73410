-- A mutex as an operator reads it, changing nothing. KEYS: lock, queue,
-- timeouts. Answers the server's clock (seconds, microseconds), the
-- holder's owner, token and PTTL ('' and -2 when free), then the live
-- waiter entries, first in line first (a place that ran out is no waiter).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {t[1], t[2], '', '', '-2'}
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  local held = redis.call('HMGET', KEYS[1], 'owner', 'token')
  if held[1] and held[2] then
    out[3], out[4] = held[1], held[2]
    out[5] = tostring(redis.call('PTTL', KEYS[1]))
  end
end
for _, e in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local expiry = redis.call('ZSCORE', KEYS[3], e)
  if expiry and tonumber(expiry) > now then out[#out + 1] = e end
end
return out
