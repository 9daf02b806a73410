
-- Breaks the holds of a semaphore or read-write lock that the caller saw:
-- KEYS: order, entries, expiry. ARGV: channel_prefix, then the tokens of
-- the holds to break. A hold granted since (a waiter admitted into the
-- room freed by a first run of this very call) is not one of them, so a
-- re-sent call breaks nothing more. The waiters that fit now are woken.
-- Answers how many holds were removed.
purge(KEYS[1], KEYS[2], KEYS[3])
local doomed = {}
for i = 2, #ARGV do doomed[ARGV[i]] = true end
local broken = 0
for _, e in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local info = redis.call('HGET', KEYS[2], e)
  if info then
    local state, _, token = parse(info)
    if state == 'h' and doomed[token] then
      redis.call('LREM', KEYS[1], 1, e)
      redis.call('HDEL', KEYS[2], e)
      redis.call('ZREM', KEYS[3], e)
      broken = broken + 1
    end
  end
end
if broken > 0 then wake_fitting(KEYS[1], KEYS[2], ARGV[1], '') end
keep(KEYS[1], KEYS[2], KEYS[3])
return broken
