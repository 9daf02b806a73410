//! The read-only scripts of an operator's inspection: one master's mutex
//! (`inspect.lua`), its semaphores and read-write locks
//! (`inspect_counted.lua`), and one Redlock node's view of a lock
//! (`redlock_inspect.lua`). Each reads every key of one lock in one script
//! run, so its answer is one consistent snapshot; none of them writes, so
//! an inspection adds nothing to the locks' own path.

use std::time::Duration;

use redis::{ErrorKind, RedisError, RedisResult};

use crate::conn::Conn;

use super::keys::{CountedKeys, Keys, LineKeys};
use super::{Scripts, answer, evalsha};

/// A mutex as `inspect.lua` read it.
#[derive(Debug)]
pub(crate) struct MutexView {
    /// The server's clock, in microseconds since the epoch.
    pub now_us: u64,
    pub holder: Option<HolderView>,
    /// The live waiter entries (`<client id>:<n>`), first in line first.
    pub waiters: Vec<String>,
}

/// A mutex's holder.
#[derive(Debug)]
pub(crate) struct HolderView {
    pub owner: String,
    pub token: u64,
    /// The lock key's PTTL; `None` for a key without one (never written
    /// so by omnilock).
    pub lease_left: Option<Duration>,
}

/// A semaphore or read-write lock as `inspect_counted.lua` read it.
#[derive(Debug)]
pub(crate) struct CountedView {
    /// The server's clock, in microseconds since the epoch.
    pub now_us: u64,
    /// The capacity recorded with the entries.
    pub capacity: Option<u64>,
    /// The live entries, holders first, each part in arrival order.
    pub entries: Vec<EntryView>,
}

/// One live entry of a semaphore or read-write lock.
#[derive(Debug)]
pub(crate) struct EntryView {
    /// Holding (`true`) or waiting.
    pub holding: bool,
    pub weight: u64,
    /// Its fencing token (0 while waiting).
    pub token: u64,
    pub owner: String,
    /// How long its lease (or a waiter's place) runs.
    pub time_left: Duration,
}

/// One Redlock node's view of a lock, as `redlock_inspect.lua` read it.
#[derive(Debug)]
pub(crate) struct NodeView {
    /// The lock key's value (`h <token> <holds> <owner>` while held), `""`
    /// when absent.
    pub value: String,
    /// The lock key's PTTL.
    pub pttl: i64,
    /// The waiters in line whose place is live: entry and ticket, in line
    /// order.
    pub line: Vec<(String, f64)>,
}

impl Scripts {
    /// `inspect.lua`. KEYS: lock, queue, timeouts.
    pub(crate) async fn inspect(&self, conn: &mut Conn, keys: &Keys) -> RedisResult<MutexView> {
        let eval = evalsha(&self.inspect, &[&keys.lock, &keys.queue, &keys.timeouts]);
        let answer: Vec<String> = answer(conn, &self.inspect, eval).await?;
        let [secs, micros, owner, token, pttl, waiters @ ..] = &answer[..] else {
            return Err(malformed("inspect"));
        };
        let holder = if owner.is_empty() {
            None
        } else {
            let pttl: i64 = number(pttl)?;
            Some(HolderView {
                owner: owner.clone(),
                token: number(token)?,
                lease_left: u64::try_from(pttl).ok().map(Duration::from_millis),
            })
        };
        Ok(MutexView {
            now_us: clock(secs, micros)?,
            holder,
            waiters: waiters.to_vec(),
        })
    }

    /// `inspect_counted.lua`. KEYS: order, entries, expiry.
    pub(crate) async fn inspect_counted(
        &self,
        conn: &mut Conn,
        keys: &CountedKeys,
    ) -> RedisResult<CountedView> {
        let eval = evalsha(
            &self.inspect_counted,
            &[&keys.order, &keys.entries, &keys.expiry],
        );
        let answer: Vec<String> = answer(conn, &self.inspect_counted, eval).await?;
        let [secs, micros, capacity, entries @ ..] = &answer[..] else {
            return Err(malformed("inspect_counted"));
        };
        let now_us = clock(secs, micros)?;
        let now_ms = now_us / 1000;
        if entries.len() % 5 != 0 {
            return Err(malformed("inspect_counted"));
        }
        let entries = entries
            .chunks_exact(5)
            .map(|entry| {
                let [state, weight, token, owner, expiry] = entry else {
                    unreachable!("chunks of five");
                };
                let expiry: f64 = number(expiry)?;
                Ok(EntryView {
                    holding: state == "h",
                    weight: number(weight)?,
                    token: number(token)?,
                    owner: owner.clone(),
                    time_left: Duration::from_millis((expiry as u64).saturating_sub(now_ms)),
                })
            })
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(CountedView {
            now_us,
            capacity: if capacity.is_empty() {
                None
            } else {
                Some(number(capacity)?)
            },
            entries,
        })
    }

    /// `redlock_inspect.lua`. KEYS: lock, line, places.
    pub(crate) async fn redlock_inspect(
        &self,
        conn: &mut Conn,
        keys: &LineKeys,
    ) -> RedisResult<NodeView> {
        let eval = evalsha(
            &self.redlock_inspect,
            &[&keys.lock, &keys.line, &keys.places],
        );
        let answer: Vec<String> = answer(conn, &self.redlock_inspect, eval).await?;
        let [value, pttl, line @ ..] = &answer[..] else {
            return Err(malformed("redlock_inspect"));
        };
        if line.len() % 2 != 0 {
            return Err(malformed("redlock_inspect"));
        }
        let line = line
            .chunks_exact(2)
            .map(|waiter| Ok((waiter[0].clone(), number(&waiter[1])?)))
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(NodeView {
            value: value.clone(),
            pttl: number(pttl)?,
            line,
        })
    }
}

/// `TIME`'s seconds and microseconds as microseconds.
fn clock(secs: &str, micros: &str) -> RedisResult<u64> {
    Ok(number::<u64>(secs)? * 1_000_000 + number::<u64>(micros)?)
}

fn number<T: std::str::FromStr>(text: &str) -> RedisResult<T> {
    text.parse()
        .map_err(|_| malformed("an inspection script (a number)"))
}

fn malformed(script: &'static str) -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "an answer of the wrong shape",
        script.to_string(),
    ))
}
