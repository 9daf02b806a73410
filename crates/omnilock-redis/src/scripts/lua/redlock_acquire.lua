
local entry, ticket = ARGV[4], tonumber(ARGV[5])
local function leave()
  if entry ~= '' then redis.call('ZREM', KEYS[2], entry) end
end
local ttl = tonumber(ARGV[2])
local state, token, holds, owner = lock_state(KEYS[1])
if state == 'h' and owner == ARGV[1] then
  if ARGV[3] ~= '1' then return {-1, 0} end
  set_held(KEYS[1], token, holds + 1, owner, math.max(redis.call('PTTL', KEYS[1]), ttl))
  leave()
  return {2, tonumber(token)}
end
if state ~= 'h' then
  local head, head_ticket = first_live(KEYS[2], KEYS[3])
  if not head or head == entry or (ticket and before(ticket, entry, head_ticket, head)) then
    leave()
    set_held(KEYS[1], ARGV[7], 1, ARGV[1], ttl)
    return {1, tonumber(ARGV[7])}
  end
end
clock()
if entry ~= '' and ticket then
  local lease = tonumber(ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZADD', KEYS[2], ticket, entry)
  redis.call('ZADD', KEYS[3], now + lease, entry)
  redis.call('PEXPIRE', KEYS[2], lease * 2)
  redis.call('PEXPIRE', KEYS[3], lease * 2)
end
return {0, redis.call('PTTL', KEYS[1]), now_us}
