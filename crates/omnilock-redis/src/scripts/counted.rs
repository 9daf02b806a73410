//! Semaphores and read-write locks ("counted" locks) on one master.
//!
//! Keys of one ([`CountedKeys`]): `order` (list of entry ids, in arrival
//! order), `entries` (hash: entry id → `<state> <weight> <token> <owner>`,
//! state `w` waiting, `h` holding, `r` released; and `#capacity`, the
//! recorded capacity) and `expiry` (zset: entry id → when its lease, its
//! waiter's place or its release record runs out). Walking `order` from the
//! front, an entry fits while the weights so far, its own included, are
//! within the capacity; a fitting waiter claims its grant with its own next
//! attempt, woken by one message. The entries that fit (holders, and
//! waiters about to claim, whose weight counts already) are always a prefix
//! of `order`, so grants are FIFO, and a writer (whose weight is the
//! capacity) holds back everyone behind it.

use std::time::Duration;

use crate::config::WaitReplicas;
use crate::conn::Conn;
use redis::aio::ConnectionLike;

use super::keys::CountedKeys;
use super::mutex::Acquired;
use super::{Scripts, answer, evalsha, ms, run};

/// What one acquire attempt of a counted lock asks for.
pub(crate) struct AcquireCounted<'a> {
    /// The acquisition's identity: a second run after a lost reply finds
    /// its grant and returns it.
    pub entry: &'a str,
    pub owner: &'a str,
    pub weight: u64,
    pub capacity: u64,
    pub ttl: Duration,
    pub entry_lease: Duration,
    /// Stay queued when busy (`false`: a try-acquire).
    pub wait: bool,
    pub channel_prefix: &'a str,
}

impl Scripts {
    /// `acquire_counted.lua`. KEYS: order, entries, expiry, fence. ARGV:
    /// entry, owner, weight, capacity, ttl_ms, entry_lease_ms, wait (1/0),
    /// channel_prefix. Answers `{1, token}` held; `{0, ms to the next
    /// change}` not (a waiting entry stays queued, its place renewed);
    /// `{-2, recorded capacity}` when the capacity differs from the one
    /// recorded.
    pub(crate) async fn acquire_counted(
        &self,
        conn: &mut impl ConnectionLike,
        keys: &CountedKeys,
        req: &AcquireCounted<'_>,
        wait: Option<WaitReplicas>,
    ) -> redis::RedisResult<(Acquired, Option<u32>)> {
        let mut eval = evalsha(
            &self.acquire_counted,
            &[&keys.order, &keys.entries, &keys.expiry, &keys.fence],
        );
        eval.arg(req.entry)
            .arg(req.owner)
            .arg(req.weight)
            .arg(req.capacity)
            .arg(ms(req.ttl))
            .arg(ms(req.entry_lease))
            .arg(u8::from(req.wait))
            .arg(req.channel_prefix);
        let (answer, confirmed) = run(conn, &self.acquire_counted, eval, wait).await?;
        Ok((Acquired::decode(answer), confirmed))
    }

    /// `release_counted.lua`. KEYS: order, entries, expiry. ARGV: entry,
    /// owner, token, channel_prefix, ttl_ms. `true` released (now, or by an
    /// earlier run of this release: the released entry leaves a record for
    /// a TTL), `false` not held by this owner and token (nothing changed).
    pub(crate) async fn release_counted(
        &self,
        conn: &mut Conn,
        keys: &CountedKeys,
        held: &Held<'_>,
        channel_prefix: &str,
    ) -> redis::RedisResult<bool> {
        let mut eval = evalsha(
            &self.release_counted,
            &[&keys.order, &keys.entries, &keys.expiry],
        );
        eval.arg(held.entry)
            .arg(held.owner)
            .arg(held.token)
            .arg(channel_prefix)
            .arg(ms(held.ttl));
        let released: i64 = answer(conn, &self.release_counted, eval).await?;
        Ok(released >= 0)
    }

    /// `renew_counted.lua`. KEYS: order, entries, expiry. ARGV: entry,
    /// owner, token, ttl_ms. `true` extended, `false` not held (its lease
    /// ran out, or another's).
    pub(crate) async fn renew_counted(
        &self,
        conn: &mut Conn,
        keys: &CountedKeys,
        held: &Held<'_>,
    ) -> redis::RedisResult<bool> {
        let mut eval = evalsha(
            &self.renew_counted,
            &[&keys.order, &keys.entries, &keys.expiry],
        );
        eval.arg(held.entry)
            .arg(held.owner)
            .arg(held.token)
            .arg(ms(held.ttl));
        let renewed: i64 = answer(conn, &self.renew_counted, eval).await?;
        Ok(renewed == 1)
    }

    /// `cancel_counted.lua`. KEYS: order, entries, expiry. ARGV: entry,
    /// channel_prefix. The entry leaves, waiting or (a grant that raced with
    /// a dropped acquire) holding; the waiters it held back are woken.
    pub(crate) async fn cancel_counted(
        &self,
        conn: &mut Conn,
        keys: &CountedKeys,
        entry: &str,
        channel_prefix: &str,
    ) -> redis::RedisResult<()> {
        let mut eval = evalsha(
            &self.cancel_counted,
            &[&keys.order, &keys.entries, &keys.expiry],
        );
        eval.arg(entry).arg(channel_prefix);
        answer::<i64>(conn, &self.cancel_counted, eval)
            .await
            .map(drop)
    }
}

impl Scripts {
    /// `break_counted.lua`. KEYS: order, entries, expiry. ARGV:
    /// channel_prefix, then the tokens of the holds to break (those the
    /// caller saw: a re-sent call cannot break a hold granted since). The
    /// waiters that fit now are woken. How many holds were removed.
    pub(crate) async fn break_counted(
        &self,
        conn: &mut Conn,
        keys: &CountedKeys,
        tokens: &[u64],
        channel_prefix: &str,
    ) -> redis::RedisResult<usize> {
        let mut eval = evalsha(
            &self.break_counted,
            &[&keys.order, &keys.entries, &keys.expiry],
        );
        eval.arg(channel_prefix).arg(tokens);
        let broken: i64 = answer(conn, &self.break_counted, eval).await?;
        Ok(usize::try_from(broken).unwrap_or(0))
    }
}

/// A held entry of a counted lock, fenced by owner and token.
pub(crate) struct Held<'a> {
    pub entry: &'a str,
    pub owner: &'a str,
    pub token: u64,
    /// How long a renewal extends it, and how long a release's record stays.
    pub ttl: Duration,
}
