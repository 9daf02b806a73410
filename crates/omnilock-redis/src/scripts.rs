//! The Lua scripts. Each runs atomically on the server; together they are
//! the whole lock protocol. Times come from the server (`TIME`), never the
//! client. All keys of one lock share the hash tag `{prefix:name}`.
//!
//! Keys of a lock: `lock` (hash: owner, holds, token, calls, waiting;
//! PEXPIRE = the lease), `fence` (the fencing counter, never below the
//! server's clock in microseconds, so it may expire: a day after it was last
//! raised), `queue` (list of waiter entries, FIFO) and `timeouts` (zset
//! entry → expiry of that waiter's place).
//! A waiter entry is `<client id>:<waiter id>`; a release PUBLISHes the head
//! entry on `<channel prefix><client id>`, so exactly one waiter is woken.
//! The prefix is `<prefix>:wake:` (one channel per client) on one server,
//! and `{prefix:name}:wake:` in a cluster (one channel per lock and client,
//! in the lock's slot, published with `SPUBLISH`; the key prefix has no
//! braces, so a leading `{` tells the two apart).
//!
//! Redlock's keys differ (`LINE_COMMON`): its lock is a string, so that a
//! free lock can be taken with a bare `SET NX PX`, and its waiters stand in
//! `line` and `places`, ordered by a ticket that is the same on every node.

use redis::Script;

/// Shared Lua: the server's clock, dropping dead waiters from the head of the
/// queue, and waking the live head.
const COMMON: &str = r#"
-- The clock is read only when a queue needs it: the uncontended path
-- stays as short as SET NX.
local now, now_us = nil, nil
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
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
local function notify(channel_prefix, entry)
  local client = string.match(entry, '^([^:]+):')
  local publish = 'PUBLISH'
  if string.sub(channel_prefix, 1, 1) == '{' then publish = 'SPUBLISH' end
  redis.pcall(publish, channel_prefix .. client, entry)
end
local function wake(queue, timeouts, channel_prefix)
  local head = live_head(queue, timeouts)
  if head then notify(channel_prefix, head) end
end
-- The next fencing token, as a string. It never goes below the server's
-- clock in microseconds, so it keeps rising when the fence counter is lost
-- (a restart without persistence, a failover to a lagging replica).
-- Formatted with %d: Lua would print a number this large in exponent form.
local function next_token(fence)
  local token = redis.call('INCR', fence)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token <= floor then
    token = floor + 1
    -- Kept a day: a name used once (a job id) leaves no key behind for
    -- good. Once it is gone, the clock floor keeps tokens rising.
    redis.call('SET', fence, string.format('%d', token), 'PX', 86400000)
  end
  return string.format('%d', token)
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
/// (reentrant) or `WouldDeadlock`.
///
/// The uncontended path (no lock, no queue: one `EXISTS` tells both) takes
/// the lock at once: no owner to compare, no call id to look up, no queue to
/// read. A lock whose queue has entries carries `waiting` = 1, set by each
/// waiter that queues behind a holder and by a grant that leaves others in
/// line, so that a release without it skips the queue (see `RELEASE`).
const ACQUIRE: &str = r#"
local call = ARGV[7] or ''
local function leave()
  if ARGV[4] ~= '' and redis.call('ZREM', KEYS[4], ARGV[4]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[4])
  end
end
local ttl = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local token = next_token(KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', 1, 'token', token, 'calls', call)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(token)}
end
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
  -- An empty queue holds no entry of ours: nothing to leave.
  local waiting = 0
  if head then
    leave()
    waiting = redis.call('EXISTS', KEYS[3])
  end
  local token = next_token(KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', 1, 'token', token, 'calls', call,
    'waiting', waiting)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(token)}
end
if ARGV[4] ~= '' then
  local lease = tonumber(ARGV[5])
  if owner then redis.call('HSET', KEYS[1], 'waiting', 1) end
  if not redis.call('ZSCORE', KEYS[4], ARGV[4]) then
    redis.call('RPUSH', KEYS[3], ARGV[4])
  end
  redis.call('ZADD', KEYS[4], clock() + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[3], lease * 2)
  redis.call('PEXPIRE', KEYS[4], lease * 2)
end
return {0, redis.call('PTTL', KEYS[1])}
"#;

/// `lock_all` in one step, on one server (the keys of different names
/// share no slot in a cluster).
/// KEYS: lock, fence, queue, timeouts of each part, parts in name order.
/// ARGV: owner, ttl_ms, call id (one per set, the same for its retries).
/// Returns {1, token, ...} every part taken (or already taken by an
/// earlier run of this call); {0} a part is held or has live waiters, and
/// nothing changed.
const ACQUIRE_ALL: &str = r#"
local owner, ttl, call = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local parts = #KEYS / 4
for i = 0, parts - 1 do
  local held = redis.call('HMGET', KEYS[i * 4 + 1], 'owner', 'calls')
  if held[1] then
    if held[1] ~= owner or not seen(held[2], call) then return {0} end
  elseif live_head(KEYS[i * 4 + 3], KEYS[i * 4 + 4]) then
    return {0}
  end
end
local answer = {1}
for i = 0, parts - 1 do
  local lock = KEYS[i * 4 + 1]
  if redis.call('HEXISTS', lock, 'owner') == 1 then
    answer[#answer + 1] = tonumber(redis.call('HGET', lock, 'token'))
  else
    local token = next_token(KEYS[i * 4 + 2])
    redis.call('HSET', lock, 'owner', owner, 'holds', 1, 'token', token, 'calls', call)
    redis.call('PEXPIRE', lock, ttl)
    answer[#answer + 1] = tonumber(token)
  end
end
return answer
"#;

/// KEYS: lock, queue, timeouts. ARGV: owner, token ('' = any: Redlock's
/// undo of a grant whose reply never came, sent on the same connection so it
/// runs right after that grant), channel_prefix, call id (optional: one per
/// hold, the same for every retry of its release).
/// Returns -1 not the owner (nothing changed); holds left otherwise (0 =
/// freed, and the next waiter woken).
///
/// Only a lock marked `waiting` (see `ACQUIRE`) looks at its queue: the
/// uncontended release is a read and a `DEL`. A waiter queued by a client
/// that does not mark locks (an older omnilock) is not woken, but finds the
/// lock free on its periodic re-check.
const RELEASE: &str = r#"
local call = ARGV[4] or ''
local held = redis.call('HMGET', KEYS[1], 'owner', 'token', 'calls', 'holds', 'waiting')
if held[1] ~= ARGV[1] or (ARGV[2] ~= '' and held[2] ~= ARGV[2]) then
  return -1
end
if seen(held[3], call) then
  return tonumber(held[4])
end
-- The last hold (the usual case) frees the lock without counting down.
local holds = 0
if tonumber(held[4]) > 1 then holds = redis.call('HINCRBY', KEYS[1], 'holds', -1) end
if holds > 0 then
  redis.call('HSET', KEYS[1], 'calls', remember(held[3], call))
  return holds
end
redis.call('DEL', KEYS[1])
if held[5] == '1' then wake(KEYS[2], KEYS[3], ARGV[3]) end
return 0
"#;

/// Shared Lua of the batched renewals: `renew_all(grant_of)`, where
/// `grant_of(lock)` answers the owner and token of the grant a lock key
/// holds (the key layouts of one server and of Redlock differ).
///
/// KEYS: the lock of each hold. ARGV: owner, token, ttl_ms of each hold in
/// turn. Returns, in order, 1 (extended) or 0 (not held) for each. Never
/// re-creates a lock that is gone. One run renews a whole batch of one
/// client's locks on one server.
const RENEW_COMMON: &str = r#"
local function renew_all(grant_of)
  local renewed = {}
  for i, lock in ipairs(KEYS) do
    local owner, token, ttl = ARGV[i * 3 - 2], ARGV[i * 3 - 1], tonumber(ARGV[i * 3])
    local held_owner, held_token = grant_of(lock)
    if held_owner == owner and held_token == token then
      if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end
      renewed[i] = 1
    else
      renewed[i] = 0
    end
  end
  return renewed
end
"#;

/// Renews a batch of one server's locks (see `RENEW_COMMON`).
const RENEW_ALL: &str = r#"
return renew_all(function(lock)
  local held = redis.call('HMGET', lock, 'owner', 'token')
  return held[1], held[2]
end)
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

/// Shared Lua of Redlock's line of waiters, on each node.
///
/// Keys: `line` (zset: entry → ticket) and `places` (zset: entry → when
/// the waiter's place runs out unless its next attempt refreshes it). A
/// waiter's ticket is the same on every node (the median of the nodes'
/// clocks when it first found the lock busy), so every node puts the
/// waiters in one order, including a node that missed some of them: a
/// waiter ahead of the node's first live entry may take the lock there even
/// if it never queued there. Heads never split the votes.
///
/// A grant takes the entry out of the line but keeps its place, so that
/// the undo of a grant that won no majority can put it back (`requeue`)
/// while a dropped waiter's cancel, which removes the place, cannot be
/// undone by an undo that runs after it.
///
/// The lock key is a string, so that a client can take a free lock with a
/// plain `SET NX PX`, as rslock does, with no script: `h <token> <holds>
/// <owner>` while held, `~ <ticket> <entry>` while kept for the first live
/// waiter in line. A release (or a break, or the cancel of the waiter it
/// was kept for) never leaves the key free while someone waits: it keeps it
/// for the first live waiter, until that waiter's place runs out, so a
/// newcomer's `SET NX` cannot pass the line. Who may take a kept lock is
/// decided by the line, not by the entry in the key (a node may have missed
/// a waiter with an earlier ticket).
const LINE_COMMON: &str = r#"
-- The head of the line that still has a place: entry, ticket, place expiry.
local function first_live(line, places)
  while true do
    local head = redis.call('ZRANGE', line, 0, 0, 'WITHSCORES')
    if #head == 0 then return false, nil, nil end
    local expiry = redis.call('ZSCORE', places, head[1])
    if expiry and tonumber(expiry) > clock() then
      return head[1], tonumber(head[2]), tonumber(expiry)
    end
    redis.call('ZREM', line, head[1])
    redis.call('ZREM', places, head[1])
  end
end
-- The lock: 'h', token, holds, owner while held; '~', ticket, entry while
-- kept for a waiter; nil when free.
local function lock_state(lock)
  local value = redis.call('GET', lock)
  if not value then return nil end
  local token, holds, owner = string.match(value, '^h (%d+) (%d+) (.*)$')
  if token then return 'h', token, tonumber(holds), owner end
  local ticket, entry = string.match(value, '^~ (%d+) (.*)$')
  return '~', ticket, entry
end
local function set_held(lock, token, holds, owner, ttl)
  redis.call('SET', lock, 'h ' .. token .. ' ' .. string.format('%d', holds) .. ' ' .. owner,
    'PX', ttl)
end
-- Frees the lock: kept for the first live waiter (and that waiter woken)
-- while its place lasts, deleted when nobody waits.
local function pass_on(lock, line, places, channel_prefix)
  local head, ticket, expiry = first_live(line, places)
  if head then
    redis.call('SET', lock, '~ ' .. string.format('%d', ticket) .. ' ' .. head,
      'PX', expiry - clock())
    notify(channel_prefix, head)
  else
    redis.call('DEL', lock)
  end
end
-- Whether (ticket, entry) comes before (t, e): the zset's order, with equal
-- tickets in byte order of the entries (Lua's `<` on strings follows the
-- server's locale).
local function before(ticket, entry, t, e)
  if ticket ~= t then return ticket < t end
  for i = 1, math.min(#entry, #e) do
    local x, y = string.byte(entry, i), string.byte(e, i)
    if x ~= y then return x < y end
  end
  return #entry < #e
end
local function requeue(line, places, entry, ticket)
  if entry ~= '' and ticket and redis.call('ZSCORE', places, entry) then
    redis.call('ZADD', line, ticket, entry)
  end
end
"#;

/// KEYS: lock, line, places.
/// ARGV: owner, ttl_ms, reentrant (1/0), entry ('' for try-acquire),
/// ticket ('' before the waiter has one), place_lease_ms, token.
/// Returns {1, token} taken; {2, token} re-entered (this owner's earlier
/// grant and its token); {0, pttl, node clock in µs} busy (queued when an
/// entry and a ticket are given); {-1, 0} held by this owner and not
/// reentrant. Without a ticket the lock is taken only when nobody waits:
/// newcomers never pass the line.
///
/// Redlock has no fencing (no order across nodes), so the token is only
/// this grant's identity, for owner+token checks: a number the client
/// draws for the round (its clock in µs, unique in its process), the same
/// on every node, so the client knows each node's grant before that node
/// answers. No fence counter key to read, raise and keep.
const REDLOCK_ACQUIRE: &str = r#"
local entry, ticket = ARGV[4], tonumber(ARGV[5])
local function leave()
  if entry ~= '' then redis.call('ZREM', KEYS[2], entry) end
end
local ttl = tonumber(ARGV[2])
local state, token, holds, owner = lock_state(KEYS[1])
if state == 'h' and owner == ARGV[1] then
  if ARGV[3] ~= '1' then return {-1, 0} end
  set_held(KEYS[1], token, holds + 1, owner, math.max(redis.call('PTTL', KEYS[1]), ttl))
  leave()
  return {2, tonumber(token)}
end
if state ~= 'h' then
  local head, head_ticket = first_live(KEYS[2], KEYS[3])
  if not head or head == entry or (ticket and before(ticket, entry, head_ticket, head)) then
    leave()
    set_held(KEYS[1], ARGV[7], 1, ARGV[1], ttl)
    return {1, tonumber(ARGV[7])}
  end
end
clock()
if entry ~= '' and ticket then
  local lease = tonumber(ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZADD', KEYS[2], ticket, entry)
  redis.call('ZADD', KEYS[3], now + lease, entry)
  redis.call('PEXPIRE', KEYS[2], lease * 2)
  redis.call('PEXPIRE', KEYS[3], lease * 2)
end
return {0, redis.call('PTTL', KEYS[1]), now_us}
"#;

/// KEYS: lock, line, places. ARGV: owner, token ('' = any: the undo of a
/// grant whose reply never came, sent on the same connection so it runs
/// right after that grant), channel_prefix, entry and ticket to put back in
/// the line ('' = none: the undo of a grant that won no majority keeps the
/// waiter's turn). Returns -2 no lock (free, or kept for a waiter); -1
/// another owner's lock or another grant; holds left otherwise (0 = freed,
/// and kept for the first in line, who is woken).
const REDLOCK_RELEASE: &str = r#"
local state, token, holds, owner = lock_state(KEYS[1])
requeue(KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5]))
if state ~= 'h' then return -2 end
if owner ~= ARGV[1] or (ARGV[2] ~= '' and token ~= ARGV[2]) then return -1 end
if holds > 1 then
  set_held(KEYS[1], token, holds - 1, owner, math.max(redis.call('PTTL', KEYS[1]), 1))
  return holds - 1
end
pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[3])
return 0
"#;

/// KEYS: lock, line, places. ARGV: entry, channel_prefix.
/// A waiter leaves the line on this node (an acquire given up, or one that
/// won its majority elsewhere); a lock that is free or was kept for it
/// passes on to the next.
const REDLOCK_CANCEL: &str = r#"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local state, _, kept_for = lock_state(KEYS[1])
if not state or (state == '~' and kept_for == ARGV[1]) then
  pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
end
return 1
"#;

/// KEYS: lock, line, places. ARGV: channel_prefix. Returns 1 if a held lock
/// was removed; the lock passes on to the first in line.
const REDLOCK_BREAK: &str = r#"
local state = lock_state(KEYS[1])
pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
if state == 'h' then return 1 end
return 0
"#;

/// Renews a batch of one Redlock node's locks (see `RENEW_COMMON`): a
/// lock kept for a waiter has no grant to renew.
const REDLOCK_RENEW_ALL: &str = r#"
return renew_all(function(lock)
  local state, token, _, owner = lock_state(lock)
  if state == 'h' then return owner, token end
  return nil, nil
end)
"#;

/// Shared Lua of semaphores and read-write locks ("counted" locks).
///
/// Keys of one: `order` (list of entry ids, in arrival order), `entries`
/// (hash: entry id → `<state> <weight> <token> <owner>`, state `w` waiting,
/// `h` holding, `r` released; and `#capacity`, the recorded capacity) and
/// `expiry` (zset: entry id → when its lease, its waiter's place or its
/// release record runs out). Walking `order` from the front, an entry fits
/// while the weights so far, its own included, are within the capacity; a
/// fitting waiter claims its grant with its own next attempt, woken by one
/// message. The entries that fit (holders, and waiters about to claim,
/// whose weight counts already) are always a prefix of `order`, so grants
/// are FIFO, and a writer (whose weight is the capacity) holds back
/// everyone behind it.
const COUNTED_COMMON: &str = r#"
local function parse(info)
  local state, weight, token, owner = string.match(info, '^(%a) (%d+) (%d+) (.*)$')
  return state, tonumber(weight), token, owner
end
-- Drops entries whose time ran out. True when one in the queue went.
local function purge(order, entries, expiry)
  local gone = false
  for _, e in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', clock())) do
    redis.call('ZREM', expiry, e)
    redis.call('HDEL', entries, e)
    if redis.call('LREM', order, 1, e) > 0 then gone = true end
  end
  return gone
end
-- Wakes every waiter that fits now (but `except`): each claims its grant.
local function wake_fitting(order, entries, channel_prefix, except)
  local capacity = tonumber(redis.call('HGET', entries, '#capacity'))
  if not capacity then return end
  local used = 0
  for _, e in ipairs(redis.call('LRANGE', order, 0, -1)) do
    local state, weight = parse(redis.call('HGET', entries, e))
    if used + weight > capacity then return end
    if state == 'w' and e ~= except then notify(channel_prefix, e) end
    used = used + weight
  end
end
-- The keys live as long as their longest-lived entry.
local function keep(order, entries, expiry)
  local last = redis.call('ZRANGE', expiry, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', order, entries, expiry)
    return
  end
  local ms = math.max(tonumber(last[2]) - clock(), 1) + 1000
  redis.call('PEXPIRE', order, ms)
  redis.call('PEXPIRE', entries, ms)
  redis.call('PEXPIRE', expiry, ms)
end
-- Milliseconds until the next entry's time runs out: when to look again.
local function next_change(expiry)
  local first = redis.call('ZRANGE', expiry, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return math.max(tonumber(first[2]) - clock(), 1)
end
"#;

/// KEYS: order, entries, expiry, fence. ARGV: entry, owner, weight,
/// capacity, ttl_ms, entry_lease_ms, wait (1/0), channel_prefix.
/// Returns {1, token} held; {0, ms to the next change} not (a waiting
/// entry stays queued, its place renewed); {-2, recorded capacity} when the
/// capacity differs from the one recorded.
///
/// An entry id is one acquire's: a second run after a lost reply finds its
/// grant and returns it.
const ACQUIRE_COUNTED: &str = r#"
local entry, owner = ARGV[1], ARGV[2]
local weight, capacity = tonumber(ARGV[3]), tonumber(ARGV[4])
local purged = purge(KEYS[1], KEYS[2], KEYS[3])
local mine = redis.call('HGET', KEYS[2], entry)
if mine then
  local state, _, token = parse(mine)
  if state == 'h' then return {1, tonumber(token)} end
  if state == 'r' then return {-3, 0} end
end
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[2], '#capacity', ARGV[4])
else
  local recorded = tonumber(redis.call('HGET', KEYS[2], '#capacity'))
  if recorded and recorded ~= capacity then return {-2, recorded} end
end
local queue = redis.call('LRANGE', KEYS[1], 0, -1)
if not mine then
  if ARGV[7] ~= '1' then
    -- A try: only beside holders, with nobody waiting, if it fits.
    local used = weight
    for _, e in ipairs(queue) do
      local state, w = parse(redis.call('HGET', KEYS[2], e))
      used = used + w
      if state ~= 'h' or used > capacity then return {0, next_change(KEYS[3])} end
    end
  end
  redis.call('RPUSH', KEYS[1], entry)
  redis.call('HSET', KEYS[2], entry, 'w ' .. ARGV[3] .. ' 0 ' .. owner)
  queue[#queue + 1] = entry
end
redis.call('ZADD', KEYS[3], clock() + tonumber(ARGV[6]), entry)
local used = 0
local granted = nil
for _, e in ipairs(queue) do
  local _, w = parse(redis.call('HGET', KEYS[2], e))
  if used + w > capacity then break end
  if e == entry then
    granted = next_token(KEYS[4])
    redis.call('HSET', KEYS[2], entry, 'h ' .. ARGV[3] .. ' ' .. granted .. ' ' .. owner)
    redis.call('ZADD', KEYS[3], clock() + tonumber(ARGV[5]), entry)
    break
  end
  used = used + w
end
if purged then wake_fitting(KEYS[1], KEYS[2], ARGV[8], entry) end
keep(KEYS[1], KEYS[2], KEYS[3])
if granted then return {1, tonumber(granted)} end
return {0, next_change(KEYS[3])}
"#;

/// KEYS: order, entries, expiry. ARGV: entry, owner, token, channel_prefix,
/// ttl_ms. Returns 1 released (0 if this release already ran), -1 not
/// held by this owner and token (nothing changed). The released entry
/// leaves a record for a TTL, so a re-sent release is told it ran.
const RELEASE_COUNTED: &str = r#"
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
"#;

/// KEYS: order, entries, expiry. ARGV: entry, owner, token, ttl_ms.
/// Returns 1 extended, 0 not held (its lease ran out, or another's).
const RENEW_COUNTED: &str = r#"
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
"#;

/// KEYS: order, entries, expiry. ARGV: entry, channel_prefix.
/// The entry leaves, waiting or (a grant that raced with a dropped
/// acquire) holding; the waiters it held back are woken.
const CANCEL_COUNTED: &str = r#"
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
"#;

/// The scripts, sent by their SHA (`EVALSHA`). A server that has lost them
/// (a restart, `SCRIPT FLUSH`) gets each loaded again (`SCRIPT LOAD`) by its
/// next use, in `node::run_script`.
pub(crate) struct Scripts {
    pub acquire: Script,
    pub acquire_all: Script,
    pub release: Script,
    pub renew_all: Script,
    pub cancel: Script,
    pub break_lock: Script,
    pub acquire_counted: Script,
    pub release_counted: Script,
    pub renew_counted: Script,
    pub cancel_counted: Script,
    pub redlock_acquire: Script,
    pub redlock_release: Script,
    pub redlock_cancel: Script,
    pub redlock_break: Script,
    pub redlock_renew_all: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with_common = |body: &str| Script::new(&format!("{COMMON}\n{body}"));
        let line = |body: &str| Script::new(&format!("{COMMON}\n{LINE_COMMON}\n{body}"));
        let counted = |body: &str| Script::new(&format!("{COMMON}\n{COUNTED_COMMON}\n{body}"));
        Scripts {
            acquire: with_common(ACQUIRE),
            acquire_all: with_common(ACQUIRE_ALL),
            release: with_common(RELEASE),
            renew_all: Script::new(&format!("{RENEW_COMMON}\n{RENEW_ALL}")),
            cancel: with_common(CANCEL),
            break_lock: with_common(BREAK),
            acquire_counted: counted(ACQUIRE_COUNTED),
            release_counted: counted(RELEASE_COUNTED),
            renew_counted: counted(RENEW_COUNTED),
            cancel_counted: counted(CANCEL_COUNTED),
            redlock_acquire: line(REDLOCK_ACQUIRE),
            redlock_release: line(REDLOCK_RELEASE),
            redlock_cancel: line(REDLOCK_CANCEL),
            redlock_break: line(REDLOCK_BREAK),
            redlock_renew_all: line(&format!("{RENEW_COMMON}\n{REDLOCK_RENEW_ALL}")),
        }
    }
}
