
local info = redis.call('HGET', KEYS[2], ARGV[1])
if not info then return 0 end
local state, _, token, owner = parse(info)
if state ~= 'h' or token ~= ARGV[3] or owner ~= ARGV[2] then return 0 end
local ends = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]))
if not ends or ends <= clock() then return 0 end
local wanted = clock() + tonumber(ARGV[4])
if wanted > ends then redis.call('ZADD', KEYS[3], wanted, ARGV[1]) end
keep(KEYS[1], KEYS[2], KEYS[3])
return 1
