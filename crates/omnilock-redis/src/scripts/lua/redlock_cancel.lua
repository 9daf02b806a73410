
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local state, _, kept_for = lock_state(KEYS[1])
if not state or (state == '~' and kept_for == ARGV[1]) then
  pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
end
return 1
