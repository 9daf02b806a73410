
return renew_all(function(lock)
  local state, token, _, owner = lock_state(lock)
  if state == 'h' then return owner, token end
  return nil, nil
end)
