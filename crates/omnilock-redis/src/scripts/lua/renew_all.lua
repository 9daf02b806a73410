
return renew_all(function(lock)
  local held = redis.call('HMGET', lock, 'owner', 'token')
  return held[1], held[2]
end)
