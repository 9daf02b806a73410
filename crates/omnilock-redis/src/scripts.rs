//! The Lua scripts. Each runs atomically on the server; together they are
//! the whole lock protocol. Times come from the server (`TIME`), never the
//! client. All keys of one lock share the hash tag `{prefix:name}`.
//!
//! Keys of a lock: `lock` (hash: owner, holds, token; PEXPIRE = the lease),
//! `fence` (the fencing counter, never expires, and never below the server's
//! clock in microseconds), `queue` (list of waiter
//! entries, FIFO) and `timeouts` (zset entry → expiry of that waiter's place).
//! A waiter entry is `<client id>:<waiter id>`; a release PUBLISHes the head
//! entry on `<channel prefix><client id>`, so exactly one waiter is woken.
//! The prefix is `<prefix>:wake:` (one channel per client) on one server,
//! and `{prefix:name}:wake:` in a cluster (one channel per lock and client,
//! in the lock's slot, published with `SPUBLISH`; the key prefix has no
//! braces, so a leading `{` tells the two apart).

use redis::Script;

/// Shared Lua: the server's clock, dropping dead waiters from the head of the
/// queue, and waking the live head.
const COMMON: &str = r#"
-- The clock is read only when a queue needs it: the uncontended path
-- stays as short as SET NX.
local now = nil
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local function live_head(queue, timeouts)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then return false end
    local expiry = redis.call('ZSCORE', timeouts, head)
    if expiry and tonumber(expiry) > clock() then return head end
    redis.call('LPOP', queue)
    redis.call('ZREM', timeouts, head)
  end
end
-- The ids of the last calls that changed a lock (space-separated, newest
-- last, at most 8): a call that runs twice (a client library re-sending
-- after a dropped connection, or omnilock retrying a release whose reply
-- was lost) finds its id and changes nothing the second time.
local function seen(calls, id)
  return id ~= '' and calls ~= nil and calls ~= false
    and string.find(' ' .. calls .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end
local function remember(calls, id)
  local list = {}
  if calls then
    for c in string.gmatch(calls, '%S+') do list[#list + 1] = c end
  end
  if id ~= '' then list[#list + 1] = id end
  while #list > 8 do table.remove(list, 1) end
  return table.concat(list, ' ')
end
-- A channel prefix that starts with the lock's hash tag is a channel in the
-- lock's slot (a cluster): sharded pub/sub, to that slot's master only.
-- pcall: the lock has changed by now, and a publish refused (an ACL user
-- without the channel) must not turn a done release into an error; the
-- waiter's re-check finds the lock free.
local function wake(queue, timeouts, channel_prefix)
  local head = live_head(queue, timeouts)
  if head then
    local client = string.match(head, '^([^:]+):')
    local publish = 'PUBLISH'
    if string.sub(channel_prefix, 1, 1) == '{' then publish = 'SPUBLISH' end
    redis.pcall(publish, channel_prefix .. client, head)
  end
end
"#;

/// KEYS: lock, fence, queue, timeouts.
/// ARGV: owner, ttl_ms, reentrant (1/0), entry ('' for try-acquire),
/// entry_lease_ms, channel_prefix, call id (optional: one per acquire,
/// the same for all its attempts).
/// Returns {1, token} taken; {0, pttl} busy (queued when an entry is given);
/// {-1, 0} held by this owner and not reentrant.
///
/// An acquire whose grant ran but whose reply was lost finds its call id
/// on its next attempt and gets that grant back, instead of a second hold
/// (reentrant) or `WouldDeadlock`. The uncontended path reads the id list
/// with the owner (one HMGET) and writes it with the grant (one HSET).
const ACQUIRE: &str = r#"
local call = ARGV[7] or ''
local function leave()
  if ARGV[4] ~= '' and redis.call('ZREM', KEYS[4], ARGV[4]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[4])
  end
end
local ttl = tonumber(ARGV[2])
local held = redis.call('HMGET', KEYS[1], 'owner', 'calls')
local owner = held[1]
if owner == ARGV[1] then
  if seen(held[2], call) then
    leave()
    return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
  end
  if ARGV[3] ~= '1' then return {-1, 0} end
  redis.call('HINCRBY', KEYS[1], 'holds', 1)
  redis.call('HSET', KEYS[1], 'calls', remember(held[2], call))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  leave()
  return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
end
local head = live_head(KEYS[3], KEYS[4])
if not owner and (not head or head == ARGV[4]) then
  leave()
  -- The token never goes below the server's clock in microseconds, so it
  -- keeps rising when the fence counter is lost (a restart without
  -- persistence, a failover to a lagging replica). Formatted with %d:
  -- Lua would print a number this large in exponent form.
  local token = redis.call('INCR', KEYS[2])
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], string.format('%d', token))
  end
  token = string.format('%d', token)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', 1, 'token', token, 'calls', call)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(token)}
end
if ARGV[4] ~= '' then
  local lease = tonumber(ARGV[5])
  if not redis.call('ZSCORE', KEYS[4], ARGV[4]) then
    redis.call('RPUSH', KEYS[3], ARGV[4])
  end
  redis.call('ZADD', KEYS[4], clock() + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[3], lease * 2)
  redis.call('PEXPIRE', KEYS[4], lease * 2)
end
return {0, redis.call('PTTL', KEYS[1])}
"#;

/// KEYS: lock, queue, timeouts. ARGV: owner, token ('' = any: Redlock's
/// undo of a grant whose reply never came, sent on the same connection so it
/// runs right after that grant), channel_prefix, call id (optional: one per
/// hold, the same for every retry of its release).
/// Returns -1 not the owner (nothing changed); holds left otherwise (0 =
/// freed, and the next waiter woken).
const RELEASE: &str = r#"
local call = ARGV[4] or ''
local held = redis.call('HMGET', KEYS[1], 'owner', 'token', 'calls')
if held[1] ~= ARGV[1] or (ARGV[2] ~= '' and held[2] ~= ARGV[2]) then
  return -1
end
if seen(held[3], call) then
  return tonumber(redis.call('HGET', KEYS[1], 'holds'))
end
local holds = redis.call('HINCRBY', KEYS[1], 'holds', -1)
if holds > 0 then
  redis.call('HSET', KEYS[1], 'calls', remember(held[3], call))
  return holds
end
redis.call('DEL', KEYS[1])
wake(KEYS[2], KEYS[3], ARGV[3])
return 0
"#;

/// KEYS: lock. ARGV: owner, token, ttl_ms. Returns 1 extended, 0 not held.
/// Never re-creates a lock that is gone.
const RENEW: &str = r#"
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1]
  or redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] then
  return 0
end
local ttl = tonumber(ARGV[3])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"#;

/// KEYS: lock, queue, timeouts. ARGV: entry, channel_prefix.
/// A waiter leaves the queue; if the lock is free, the new head is woken.
const CANCEL: &str = r#"
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake(KEYS[2], KEYS[3], ARGV[2])
end
return 1
"#;

/// KEYS: lock, queue, timeouts. ARGV: channel_prefix, token (optional: the
/// holder's the caller saw; Redlock's nodes each have their own and give
/// none). Returns 1 if a lock was removed. With a token, only that holder's
/// lock is broken: a second run of the same call, after the next waiter
/// took the lock, changes nothing.
const BREAK: &str = r#"
local token = ARGV[2] or ''
if token ~= '' and redis.call('HGET', KEYS[1], 'token') ~= token then return 0 end
local existed = redis.call('DEL', KEYS[1])
wake(KEYS[2], KEYS[3], ARGV[1])
return existed
"#;

/// The loaded scripts (EVALSHA, falling back to EVAL once after a restart
/// or `SCRIPT FLUSH`).
pub(crate) struct Scripts {
    pub acquire: Script,
    pub release: Script,
    pub renew: Script,
    pub cancel: Script,
    pub break_lock: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with_common = |body: &str| Script::new(&format!("{COMMON}\n{body}"));
        Scripts {
            acquire: with_common(ACQUIRE),
            release: with_common(RELEASE),
            renew: Script::new(RENEW),
            cancel: with_common(CANCEL),
            break_lock: with_common(BREAK),
        }
    }
}
