
purge(KEYS[1], KEYS[2], KEYS[3])
local info = redis.call('HGET', KEYS[2], ARGV[1])
if not info then return -1 end
local state, weight, token, owner = parse(info)
if token ~= ARGV[3] or owner ~= ARGV[2] then return -1 end
if state == 'r' then return 0 end
if state ~= 'h' then return -1 end
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], 'r ' .. weight .. ' ' .. token .. ' ' .. owner)
redis.call('ZADD', KEYS[3], clock() + tonumber(ARGV[5]), ARGV[1])
wake_fitting(KEYS[1], KEYS[2], ARGV[4], '')
keep(KEYS[1], KEYS[2], KEYS[3])
return 1
