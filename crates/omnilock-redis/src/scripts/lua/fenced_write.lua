-- A fenced write: refused when a higher fencing token has written the key.
-- KEYS[1]: the key written; KEYS[2]: its fence (the highest token that
-- wrote it, kept for good).
-- ARGV: token, then `set <value>`, `hset <field> <value>`, `rpush <value>`,
-- `del`, or `claim` (no write: the fence alone rises, so that lower tokens
-- are refused from now on).
-- Answers {1, token} written; {0, highest} refused, nothing changed.

-- Decimal strings without leading zeros compare by length, then
-- lexically: exact for every u64, where Lua's doubles are not.
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local highest = redis.call('GET', KEYS[2])
if highest and below(ARGV[1], highest) then return {0, highest} end
-- The write first: if it fails (a key of another type), the script stops
-- before the fence moves.
local op = ARGV[2]
if op == 'set' then
  redis.call('SET', KEYS[1], ARGV[3])
elseif op == 'hset' then
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
elseif op == 'rpush' then
  redis.call('RPUSH', KEYS[1], ARGV[3])
elseif op == 'del' then
  redis.call('DEL', KEYS[1])
end
if highest ~= ARGV[1] then redis.call('SET', KEYS[2], ARGV[1]) end
return {1, ARGV[1]}
