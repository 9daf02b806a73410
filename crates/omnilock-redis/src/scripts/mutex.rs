//! The mutex of one master. Keys of a lock ([`Keys`]): `lock` (hash:
//! owner, holds, token, calls, waiting; PEXPIRE = the lease), `fence` (the
//! fencing counter, never below the server's clock in microseconds, so it
//! may expire: a day after it was last raised), `queue` (list of waiter
//! entries, FIFO) and `timeouts` (zset entry → expiry of that waiter's
//! place).

use std::time::Duration;

use crate::config::WaitReplicas;
use crate::conn::Conn;
use redis::aio::ConnectionLike;

use super::keys::Keys;
use super::{Scripts, answer, evalsha, ms, run};

/// What one acquire attempt of a mutex asks for (a semaphore's or
/// read-write lock's is [`AcquireCounted`](super::counted::AcquireCounted)).
pub(crate) struct Acquire<'a> {
    pub owner: &'a str,
    pub ttl: Duration,
    pub reentrant: bool,
    /// The waiter's entry: `""` for a mutex's try-acquire (nothing queued).
    pub entry: &'a str,
    /// How long a waiter's place lasts without its next attempt.
    pub entry_lease: Duration,
    pub channel_prefix: &'a str,
    /// One per acquire, the same for all its attempts: an attempt whose
    /// grant ran but whose reply was lost gets that grant back on the next.
    pub call: &'a str,
}

/// The answer of an acquire attempt (of a mutex, a semaphore or a
/// read-write lock).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken, with this fencing token.
    Taken(u64),
    /// Busy (and queued when an entry was given), for about this long if
    /// the server knows.
    Busy(Option<Duration>),
    /// Held by this owner, and the request is not reentrant.
    HeldNotReentrant,
    /// A semaphore in use with this other number of permits.
    CapacityMismatch(i64),
    /// The acquisition's entry was released already.
    EntryReleased,
}

impl Acquired {
    /// `{status, value}` as the acquire scripts answer.
    pub(super) fn decode((status, value): (i64, i64)) -> Acquired {
        match status {
            1 => Acquired::Taken(value as u64),
            -1 => Acquired::HeldNotReentrant,
            -2 => Acquired::CapacityMismatch(value),
            -3 => Acquired::EntryReleased,
            _ => Acquired::Busy((value > 0).then(|| Duration::from_millis(value as u64))),
        }
    }
}

/// The answer of a release.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released: this many holds are left (0 = freed, and the next waiter
    /// woken).
    HoldsLeft(u32),
    /// Not this owner's (nothing changed).
    NotOwner,
}

impl Scripts {
    /// `acquire.lua`. KEYS: lock, fence, queue, timeouts. ARGV: owner,
    /// ttl_ms, reentrant (1/0), entry, entry_lease_ms, channel_prefix, call
    /// id. Answers `{1, token}` taken, `{0, pttl}` busy, `{-1, 0}` held by
    /// this owner and not reentrant.
    ///
    /// The uncontended path (no lock, no queue: one `EXISTS` tells both)
    /// takes the lock at once: no owner to compare, no call id to look up,
    /// no queue to read. A lock whose queue has entries carries `waiting` =
    /// 1, set by each waiter that queues behind a holder and by a grant that
    /// leaves others in line, so that a release without it skips the queue.
    ///
    /// With `wait`, also how many replicas confirmed the write.
    pub(crate) async fn acquire(
        &self,
        conn: &mut impl ConnectionLike,
        keys: &Keys,
        req: &Acquire<'_>,
        wait: Option<WaitReplicas>,
    ) -> redis::RedisResult<(Acquired, Option<u32>)> {
        let eval = self.acquire_eval(keys, req);
        let (answer, confirmed) = run(conn, &self.acquire, eval, wait).await?;
        Ok((Acquired::decode(answer), confirmed))
    }

    /// `acquire.lua` for a waiter that blocks in the server first: `BLPOP`
    /// on the waiter's wake-up list (`<queue key>:<entry>`, which a release
    /// pushes onto for the head of the line) for up to `block`, and the
    /// attempt right behind it in one pipeline on `conn`, a connection of
    /// the waiter's own. The server runs the attempt the moment the waiter
    /// is unblocked, or when `block` runs out. An attempt the server no
    /// longer has the script for is `NOSCRIPT`, left to the caller.
    pub(crate) async fn acquire_after_wake(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        keys: &Keys,
        req: &Acquire<'_>,
        block: Duration,
    ) -> redis::RedisResult<Acquired> {
        let mut wait = redis::cmd("BLPOP");
        wait.arg(format!("{}:{}", keys.queue, req.entry))
            .arg(format!("{:.3}", block.as_secs_f64().max(0.001)));
        let eval = self.acquire_eval(keys, req);
        let mut pipe = redis::pipe();
        pipe.add_command(wait).ignore().add_command(eval);
        let (answer,): ((i64, i64),) = pipe.query_async(conn).await?;
        Ok(Acquired::decode(answer))
    }

    /// The `EVALSHA` of `acquire.lua` for `req` (see [`Scripts::acquire`]).
    fn acquire_eval(&self, keys: &Keys, req: &Acquire<'_>) -> redis::Cmd {
        let mut eval = evalsha(
            &self.acquire,
            &[&keys.lock, &keys.fence, &keys.queue, &keys.timeouts],
        );
        eval.arg(req.owner)
            .arg(ms(req.ttl))
            .arg(u8::from(req.reentrant))
            .arg(req.entry)
            .arg(ms(req.entry_lease))
            .arg(req.channel_prefix)
            .arg(req.call);
        eval
    }

    /// `acquire_all.lua`: `lock_all` in one step, on one server (the keys
    /// of different names share no slot in a cluster). KEYS: lock, fence,
    /// queue, timeouts of each part, parts in name order. ARGV: owner,
    /// ttl_ms, call id (one per set, the same for its retries).
    ///
    /// `Some(Some(tokens))` every part taken (or already taken by an
    /// earlier run of this call), `Some(None)` a part is held or has live
    /// waiters and nothing changed, `None` an answer of the wrong shape.
    pub(crate) async fn acquire_all(
        &self,
        conn: &mut Conn,
        keys: &[Keys],
        owner: &str,
        ttl: Duration,
        call: &str,
    ) -> redis::RedisResult<Option<Option<Vec<u64>>>> {
        let key_refs: Vec<&str> = keys
            .iter()
            .flat_map(|k| [&*k.lock, &*k.fence, &*k.queue, &*k.timeouts])
            .collect();
        let mut eval = evalsha(&self.acquire_all, &key_refs);
        eval.arg(owner).arg(ms(ttl)).arg(call);
        let answer: Vec<i64> = answer(conn, &self.acquire_all, eval).await?;
        match answer.split_first() {
            Some((1, tokens)) if tokens.len() == keys.len() => {
                Ok(Some(Some(tokens.iter().map(|&t| t as u64).collect())))
            }
            Some((0, _)) => Ok(Some(None)),
            _ => Ok(None),
        }
    }

    /// `release.lua`. KEYS: lock, queue, timeouts. ARGV: owner, token,
    /// channel_prefix, call id (one per hold, the same for every retry of
    /// its release). Only a lock marked `waiting` looks at its queue: the
    /// uncontended release is a read and a `DEL`.
    pub(crate) async fn release(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        owner: &str,
        token: u64,
        channel_prefix: &str,
        call: &str,
    ) -> redis::RedisResult<Released> {
        let mut eval = evalsha(&self.release, &[&keys.lock, &keys.queue, &keys.timeouts]);
        eval.arg(owner).arg(token).arg(channel_prefix).arg(call);
        let holds: i64 = answer(conn, &self.release, eval).await?;
        Ok(match u32::try_from(holds) {
            Ok(left) => Released::HoldsLeft(left),
            Err(_) => Released::NotOwner,
        })
    }

    /// `renew_all.lua`: extends a batch of one client's locks on one
    /// server. KEYS: the lock of each hold. ARGV: owner, token, ttl_ms of
    /// each hold in turn. Never re-creates a lock that is gone.
    ///
    /// Whether each hold is still its owner's and extended, in order (`None`
    /// for an answer about a different number of locks); with `wait`, also
    /// how many replicas confirmed.
    pub(crate) async fn renew_all(
        &self,
        conn: &mut impl ConnectionLike,
        holds: &[Renewal<'_>],
        wait: Option<WaitReplicas>,
    ) -> redis::RedisResult<(Option<Vec<bool>>, Option<u32>)> {
        run_renewals(conn, &self.renew_all, holds, wait).await
    }

    /// `cancel.lua`. KEYS: lock, queue, timeouts. ARGV: entry,
    /// channel_prefix. A waiter leaves the queue; if the lock is free, the
    /// new head is woken.
    pub(crate) async fn cancel(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        entry: &str,
        channel_prefix: &str,
    ) -> redis::RedisResult<()> {
        let mut eval = evalsha(&self.cancel, &[&keys.lock, &keys.queue, &keys.timeouts]);
        eval.arg(entry).arg(channel_prefix);
        answer::<i64>(conn, &self.cancel, eval).await.map(drop)
    }

    /// `break.lua`. KEYS: lock, queue, timeouts. ARGV: channel_prefix, the
    /// holder's token the caller saw: only that holder's lock is broken,
    /// so a second run of the same call, after the next waiter took the
    /// lock, changes nothing. Whether a lock was removed.
    pub(crate) async fn break_lock(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        channel_prefix: &str,
        token: u64,
    ) -> redis::RedisResult<bool> {
        let mut eval = evalsha(&self.break_lock, &[&keys.lock, &keys.queue, &keys.timeouts]);
        eval.arg(channel_prefix).arg(token);
        let existed: i64 = answer(conn, &self.break_lock, eval).await?;
        Ok(existed == 1)
    }
}

/// One hold of a batched renewal.
pub(crate) struct Renewal<'a> {
    pub lock: &'a str,
    pub owner: &'a str,
    pub token: u64,
    pub ttl: Duration,
}

/// A renewal script (one master's or a Redlock node's) over `holds`: `None`
/// for an answer about a different number of locks.
pub(super) async fn run_renewals(
    conn: &mut impl ConnectionLike,
    script: &redis::Script,
    holds: &[Renewal<'_>],
    wait: Option<WaitReplicas>,
) -> redis::RedisResult<(Option<Vec<bool>>, Option<u32>)> {
    let locks: Vec<&str> = holds.iter().map(|h| h.lock).collect();
    let mut eval = evalsha(script, &locks);
    for hold in holds {
        eval.arg(hold.owner).arg(hold.token).arg(ms(hold.ttl));
    }
    let (renewed, confirmed): (Vec<i64>, _) = run(conn, script, eval, wait).await?;
    let renewed =
        (renewed.len() == holds.len()).then(|| renewed.into_iter().map(|r| r == 1).collect());
    Ok((renewed, confirmed))
}
