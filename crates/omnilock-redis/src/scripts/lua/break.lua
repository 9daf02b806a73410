
local token = ARGV[2] or ''
if token ~= '' and redis.call('HGET', KEYS[1], 'token') ~= token then return 0 end
local existed = redis.call('DEL', KEYS[1])
wake(KEYS[2], KEYS[3], ARGV[1])
return existed
