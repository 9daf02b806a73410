-- A guarded write: the application's writes, applied only while the
-- lock's hold is the one given, in the same atomic step as the check.
-- KEYS[1]: the lock; KEYS[2..]: the keys written.
-- ARGV: owner, token, then the writes, each `set <key index> <value>`,
-- `hset <key index> <field> <value>`, `rpush <key index> <value>` or
-- `del <key index>` (an index into KEYS).
-- Answers {1, token} written; {0, ''} nobody holds the lock (released,
-- broken, or its lease ran out: the key expired); {-1, token} another hold
-- has it, with its token; {-2, why} a write meets a key of another type.
-- Nothing is written unless the answer is 1.
local held = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not held[1] then return {0, ''} end
if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then return {-1, held[2]} end
-- Redis does not undo a script's writes when a later one fails, so every
-- write is checked against the type its key will have before any is made:
-- a failed HSET or RPUSH would leave the writes before it applied.
local wants = {hset = 'hash', rpush = 'list'}
local types = {}
local i = 3
while i <= #ARGV do
  local op, index = ARGV[i], tonumber(ARGV[i + 1])
  local key = KEYS[index]
  if types[index] == nil then types[index] = redis.call('TYPE', key)['ok'] end
  local want = wants[op]
  if want and types[index] ~= 'none' and types[index] ~= want then
    return {-2, key .. ' holds a ' .. types[index] .. ', not a ' .. want}
  end
  if op == 'set' then types[index] = 'string'
  elseif op == 'del' then types[index] = 'none'
  else types[index] = want end
  i = i + (op == 'hset' and 4 or (op == 'del' and 2 or 3))
end
i = 3
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
