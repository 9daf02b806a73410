
local function renew_all(grant_of)
  local renewed = {}
  for i, lock in ipairs(KEYS) do
    local owner, token, ttl = ARGV[i * 3 - 2], ARGV[i * 3 - 1], tonumber(ARGV[i * 3])
    local held_owner, held_token = grant_of(lock)
    if held_owner == owner and held_token == token then
      if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end
      renewed[i] = 1
    else
      renewed[i] = 0
    end
  end
  return renewed
end
