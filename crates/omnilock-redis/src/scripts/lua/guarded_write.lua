-- A guarded write: the application's writes, applied only while the
-- lock's hold is the one given, in the same atomic step as the check.
-- KEYS[1]: the lock; KEYS[2..]: the keys written.
-- ARGV: owner, token, then the writes, each `set <key index> <value>`,
-- `hset <key index> <field> <value>`, `rpush <key index> <value>` or
-- `del <key index>` (an index into KEYS).
-- Answers {1, token} written; {0, ''} nobody holds the lock (released,
-- broken, or its lease ran out: the key expired); {-1, token} another hold
-- has it, with its token. Nothing is written unless the answer is 1.
local held = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not held[1] then return {0, ''} end
if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then return {-1, held[2]} end
local i = 3
while i <= #ARGV do
  local op, key = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  if op == 'set' then
    redis.call('SET', key, ARGV[i + 2])
    i = i + 3
  elseif op == 'hset' then
    redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  elseif op == 'rpush' then
    redis.call('RPUSH', key, ARGV[i + 2])
    i = i + 3
  else
    redis.call('DEL', key)
    i = i + 2
  end
end
return {1, ARGV[2]}
