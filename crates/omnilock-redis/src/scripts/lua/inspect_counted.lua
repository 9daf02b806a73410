-- A semaphore or read-write lock as an operator reads it, changing
-- nothing. KEYS: order, entries, expiry. Answers the server's clock
-- (seconds, microseconds), the recorded capacity ('' when none), then for
-- each live entry in `order` (holders first, then waiters, in arrival
-- order): state (`h` holding, `w` waiting), weight, token, owner, and when
-- its lease or place runs out (ms). An entry whose time ran out is left
-- out, purged or not.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {t[1], t[2], redis.call('HGET', KEYS[2], '#capacity') or ''}
for _, e in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local info = redis.call('HGET', KEYS[2], e)
  local expiry = redis.call('ZSCORE', KEYS[3], e)
  if info and expiry and tonumber(expiry) > now then
    local state, weight, token, owner = string.match(info, '^(%a) (%d+) (%d+) (.*)$')
    if state == 'h' or state == 'w' then
      for _, v in ipairs({state, weight, token, owner, expiry}) do out[#out + 1] = v end
    end
  end
end
return out
