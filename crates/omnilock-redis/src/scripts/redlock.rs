//! Redlock's line of waiters, on each node.
//!
//! Keys ([`LineKeys`]): `line` (zset: entry → ticket) and `places` (zset:
//! entry → when the waiter's place runs out unless its next attempt
//! refreshes it). A waiter's ticket is the same on every node (the median
//! of the nodes' clocks when it first found the lock busy), so every node
//! puts the waiters in one order, including a node that missed some of
//! them: a waiter ahead of the node's first live entry may take the lock
//! there even if it never queued there. Heads never split the votes.
//!
//! A grant takes the entry out of the line but keeps its place, so that
//! the undo of a grant that won no majority can put it back (`requeue`)
//! while a dropped waiter's cancel, which removes the place, cannot be
//! undone by an undo that runs after it.
//!
//! The lock key is a string, so that a client can take a free lock with a
//! plain `SET NX PX`, as rslock does, with no script: `h <token> <holds>
//! <owner>` while held, `~ <ticket> <entry>` while kept for the first live
//! waiter in line. A release (or a break, or the cancel of the waiter it
//! was kept for) never leaves the key free while someone waits: it keeps it
//! for the first live waiter, until that waiter's place runs out, so a
//! newcomer's `SET NX` cannot pass the line. Who may take a kept lock is
//! decided by the line, not by the entry in the key (a node may have missed
//! a waiter with an earlier ticket).

use std::time::Duration;

use crate::conn::Conn;

use super::keys::LineKeys;
use super::mutex::{Renewal, run_renewals};
use super::{Scripts, answer, evalsha, ms};

/// What one node's acquire asks for.
pub(crate) struct LineAcquire<'a> {
    pub owner: &'a str,
    pub ttl: Duration,
    pub reentrant: bool,
    /// The waiter's entry, `""` for a try-acquire.
    pub entry: &'a str,
    /// The waiter's ticket, `""` before it has one: then the lock is taken
    /// only when nobody waits, so newcomers never pass the line.
    pub ticket: &'a str,
    pub place_lease: Duration,
    /// This round's grant identity: a number the client draws (its clock in
    /// µs, unique in its process), the same on every node, so the client
    /// knows each node's grant before that node answers. Redlock has no
    /// fencing (no order across nodes), so no fence counter to read.
    pub token: u64,
}

/// One node's answer to an acquire.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineAcquired {
    /// Taken, with this grant's token.
    Granted(u64),
    /// Re-entered: this owner's earlier grant and its token.
    Reentered(u64),
    /// Held by this owner and not reentrant.
    HeldNotReentrant,
    /// Busy (queued when an entry and a ticket were given): the lock's
    /// remaining lease in ms and the node's clock in µs.
    Busy { pttl: i64, clock: u64 },
    /// An answer of another shape.
    Other,
}

/// One node's answer to a release.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineReleased {
    /// Released (holds left, or freed and kept for the first in line).
    Released,
    /// No lock there (free, or kept for a waiter).
    Absent,
    /// Another owner's lock, or another grant.
    NotOwner,
}

impl Scripts {
    /// `redlock_acquire.lua`. KEYS: lock, line, places. ARGV: owner, ttl_ms,
    /// reentrant (1/0), entry, ticket, place_lease_ms, token. Answers `{1,
    /// token}` taken, `{2, token}` re-entered, `{0, pttl, node clock in
    /// µs}` busy, `{-1, 0}` held by this owner and not reentrant.
    pub(crate) async fn redlock_acquire(
        &self,
        conn: &mut Conn,
        keys: &LineKeys,
        req: &LineAcquire<'_>,
    ) -> redis::RedisResult<LineAcquired> {
        let mut eval = evalsha(
            &self.redlock_acquire,
            &[&keys.lock, &keys.line, &keys.places],
        );
        eval.arg(req.owner)
            .arg(ms(req.ttl))
            .arg(u8::from(req.reentrant))
            .arg(req.entry)
            .arg(req.ticket)
            .arg(ms(req.place_lease))
            .arg(req.token);
        let answer: Vec<i64> = answer(conn, &self.redlock_acquire, eval).await?;
        Ok(match answer[..] {
            [1, token, ..] => LineAcquired::Granted(token as u64),
            [2, token, ..] => LineAcquired::Reentered(token as u64),
            [-1, ..] => LineAcquired::HeldNotReentrant,
            [0, pttl, clock, ..] => LineAcquired::Busy {
                pttl,
                clock: clock as u64,
            },
            _ => LineAcquired::Other,
        })
    }

    /// `redlock_release.lua`. KEYS: lock, line, places. ARGV: owner, token
    /// (`""` = any: the undo of a grant whose reply never came, sent on the
    /// same connection so it runs right after that grant), channel_prefix,
    /// entry and ticket to put back in the line (`""` = none: the undo of a
    /// grant that won no majority keeps the waiter's turn). Answers -2 no
    /// lock, -1 another owner's, holds left otherwise (0 = freed, and kept
    /// for the first in line, who is woken).
    pub(crate) async fn redlock_release(
        &self,
        conn: &mut Conn,
        keys: &LineKeys,
        owner: &str,
        token: &str,
        channel_prefix: &str,
        requeue: (&str, &str),
    ) -> redis::RedisResult<LineReleased> {
        let mut eval = evalsha(
            &self.redlock_release,
            &[&keys.lock, &keys.line, &keys.places],
        );
        eval.arg(owner)
            .arg(token)
            .arg(channel_prefix)
            .arg(requeue.0)
            .arg(requeue.1);
        let holds: i64 = answer(conn, &self.redlock_release, eval).await?;
        Ok(match holds {
            -2 => LineReleased::Absent,
            n if n < 0 => LineReleased::NotOwner,
            _ => LineReleased::Released,
        })
    }

    /// `redlock_cancel.lua`. KEYS: lock, line, places. ARGV: entry,
    /// channel_prefix. A waiter leaves the line on this node (an acquire
    /// given up, or one that won its majority elsewhere); a lock that is
    /// free or was kept for it passes on to the next.
    pub(crate) async fn redlock_cancel(
        &self,
        conn: &mut Conn,
        keys: &LineKeys,
        entry: &str,
        channel_prefix: &str,
    ) -> redis::RedisResult<()> {
        let mut eval = evalsha(
            &self.redlock_cancel,
            &[&keys.lock, &keys.line, &keys.places],
        );
        eval.arg(entry).arg(channel_prefix);
        answer::<i64>(conn, &self.redlock_cancel, eval)
            .await
            .map(drop)
    }

    /// `redlock_break.lua`. KEYS: lock, line, places. ARGV: channel_prefix.
    /// Whether a held lock was removed; the lock passes on to the first in
    /// line.
    pub(crate) async fn redlock_break(
        &self,
        conn: &mut Conn,
        keys: &LineKeys,
        channel_prefix: &str,
    ) -> redis::RedisResult<bool> {
        let mut eval = evalsha(&self.redlock_break, &[&keys.lock, &keys.line, &keys.places]);
        eval.arg(channel_prefix);
        let broken: i64 = answer(conn, &self.redlock_break, eval).await?;
        Ok(broken == 1)
    }

    /// `redlock_renew_all.lua`: a batch of one node's locks, as
    /// [`Scripts::renew_all`] (a lock kept for a waiter has no grant to
    /// renew); `None` for an answer about a different number of locks.
    pub(crate) async fn redlock_renew_all(
        &self,
        conn: &mut Conn,
        holds: &[Renewal<'_>],
    ) -> redis::RedisResult<Option<Vec<bool>>> {
        run_renewals(conn, &self.redlock_renew_all, holds, None)
            .await
            .map(|(renewed, _)| renewed)
    }
}
