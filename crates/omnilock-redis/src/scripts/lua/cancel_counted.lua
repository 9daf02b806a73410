
purge(KEYS[1], KEYS[2], KEYS[3])
local info = redis.call('HGET', KEYS[2], ARGV[1])
if info and parse(info) ~= 'r' then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  wake_fitting(KEYS[1], KEYS[2], ARGV[2], '')
end
keep(KEYS[1], KEYS[2], KEYS[3])
return 1
