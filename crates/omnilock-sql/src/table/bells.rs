//! MySQL/MariaDB table mode's pushed hand-off. The database has no
//! LISTEN/NOTIFY, but it wakes a session blocked in `GET_LOCK` the moment
//! the holder of that name lets go. So each held mutex has a *bell*, a
//! `GET_LOCK` name of its own, and:
//! - the holder's store takes the bell just after it takes the row, and
//!   lets it go just after it frees the row, on one connection of its own
//!   (the *ringer*);
//! - a waiter blocks in `GET_LOCK(bell) + RELEASE_LOCK(bell)` on a
//!   connection of its own instead of sleeping, for as long as it would
//!   have slept, and looks at the row again when the database wakes it.
//!
//! Fair mode wakes one waiter per hand-off, not the line (ZooKeeper's
//! recipe): each ticket in the waiting line has a bell too, taken by its
//! store's ringer while the ticket lives. Only the head of the line waits
//! on the holder's bell; every other waiter waits on the ticket bell of
//! the waiter just ahead of it, which rings when that one leaves the line.
//! A granted waiter's ringer takes the holder's bell *before* it lets its
//! ticket bell go, so the next head always finds the new holder's bell
//! taken.
//!
//! A bell is only a hint: the row decides who holds the lock, always. A
//! holder whose bell is not taken (yet, or at all: its ringer's connection
//! failed) leaves its waiters to poll as before, which they notice because
//! the bell is free when they come to wait on it. A holder that crashes
//! frees its bell with its connection, so its waiters look at once and
//! wait for the lease to run out.
//!
//! The ringer works through its orders in the background, so neither the
//! acquire nor the release waits for it. It takes a bell only once the
//! hold has lasted a few milliseconds: an application locking one name
//! again and again, uncontended, sends the database no bell at all.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use omnilock_core::lock_unpoisoned;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{Semaphore, mpsc};

use crate::key::Key;

/// How long a hold taken at the first attempt lasts before its bell is
/// taken. Shorter holds (an uncontended loop) ring nothing; a waiter that
/// comes meanwhile polls until the bell is taken. A hold the store had to
/// wait for takes its bell at once: others likely wait too.
const TAKE_AFTER: Duration = Duration::from_millis(5);

/// How long the ringer waits for a connection before it skips an order
/// (waiters then poll).
const RINGER_CONNECT: Duration = Duration::from_secs(5);

/// How long the ringer waits for a bell that another session holds: the
/// previous holder's ringer may not have let go yet, or a waiter passes
/// through it.
const TAKE_WAIT: Duration = Duration::from_millis(20);

/// One waiter's wait on a bell: was it woken by a release?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rung {
    /// The bell was held and its holder let go: look now.
    Rang,
    /// The bell was held all along; the wait ran its time.
    Silent,
    /// Nobody held the bell (the holder has none yet, or at all), or no
    /// waiting connection was to be had: sleep as polling would.
    Unavailable,
}

/// The bells of one table-mode store.
pub(crate) struct Bells {
    table: String,
    options: MySqlConnectOptions,
    orders: mpsc::UnboundedSender<Order>,
    ringer: tokio::task::JoinHandle<()>,
    /// Connections that blocked in a wait and came back, for the next, with
    /// when they came back: the last back goes first, and the store's
    /// trimming closes the ones unused for a while (`trim.rs`).
    idle: Mutex<Vec<(MySqlConnection, Instant)>>,
    /// How many waits may block at once; a waiter beyond that polls.
    waits: Semaphore,
}

enum Order {
    /// Take the bell; `now`: without waiting [`TAKE_AFTER`] first.
    Take {
        bell: String,
        now: bool,
    },
    Free(String),
}

impl Bells {
    /// The bells of the store on `table`, connecting with `options`; at
    /// most `waits` waiters of this store block on a bell at once.
    pub(crate) fn start(table: &str, options: MySqlConnectOptions, waits: usize) -> Self {
        let (orders, received) = mpsc::unbounded_channel();
        let ringer = tokio::spawn(ring(options.clone(), received));
        Bells {
            table: table.to_string(),
            options,
            orders,
            ringer,
            idle: Mutex::new(Vec::new()),
            waits: Semaphore::new(waits),
        }
    }

    fn bell(&self, name: &str) -> String {
        Key::new(&self.table, name).mysql_bell()
    }

    /// The bell of fair mode's ticket `id` (ids are unique per table).
    fn ticket_bell(&self, id: i64) -> String {
        Key::new(&self.table, "").mysql_ticket_bell(id)
    }

    /// The row of `name` was just taken by this store: take its bell.
    /// `contended`: the store waited for it, so others likely wait too,
    /// and the bell is taken at once rather than after [`TAKE_AFTER`].
    pub(crate) fn take(&self, name: &str, contended: bool) {
        let _ = self.orders.send(Order::Take {
            bell: self.bell(name),
            now: contended,
        });
    }

    /// The row of `name` was just freed (or found not ours): let its bell
    /// go, if this store took it.
    pub(crate) fn free(&self, name: &str) {
        let _ = self.orders.send(Order::Free(self.bell(name)));
    }

    /// Fair mode: ticket `id` joined the line; its bell is taken at once,
    /// for the waiter behind it to wait on.
    pub(crate) fn take_ticket(&self, id: i64) {
        let _ = self.orders.send(Order::Take {
            bell: self.ticket_bell(id),
            now: true,
        });
    }

    /// Fair mode: ticket `id` left the line (its row is gone): its bell
    /// wakes the waiter behind it. Sent after the holder's bell of a
    /// granted ticket, which the ringer takes first.
    pub(crate) fn free_ticket(&self, id: i64) {
        let _ = self.orders.send(Order::Free(self.ticket_bell(id)));
    }

    /// Waits up to `timeout` for the holder of `name` to let its bell go.
    pub(crate) async fn wait(&self, name: &str, timeout: Duration) -> Rung {
        self.wait_on(self.bell(name), timeout).await
    }

    /// Fair mode: waits up to `timeout` for ticket `id` to leave the line.
    pub(crate) async fn wait_behind(&self, id: i64, timeout: Duration) -> Rung {
        self.wait_on(self.ticket_bell(id), timeout).await
    }

    /// Waits up to `timeout` for the session holding `bell` to let it go.
    /// Dropped midway, the wait's connection closes (the database ends its
    /// `GET_LOCK`).
    async fn wait_on(&self, bell: String, timeout: Duration) -> Rung {
        let Ok(_permit) = self.waits.try_acquire() else {
            return Rung::Unavailable;
        };
        // A server that does not answer must not keep the waiter past its
        // wait: the connect and the statement are bounded by it (plus a
        // second for the round trip), and a dropped statement closes its
        // connection.
        let bound = timeout + Duration::from_secs(1);
        let popped = lock_unpoisoned(&self.idle).pop().map(|(conn, _)| conn);
        let mut conn = match popped {
            Some(conn) => conn,
            None => match tokio::time::timeout(bound, self.options.connect()).await {
                Ok(Ok(conn)) => conn,
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "omnilock mysql: no connection to wait on a bell; polling");
                    return Rung::Unavailable;
                }
                Err(_) => return Rung::Unavailable,
            },
        };
        // `IS_FREE_LOCK` first: a free bell means nobody will ring it. A
        // held one is waited for, and let go at once by the same
        // statement, so that the next waiter in the database's line wakes
        // too and this session never holds it past the statement.
        let query = sqlx::query_as("SELECT IS_FREE_LOCK(?), GET_LOCK(?, ?) + RELEASE_LOCK(?)")
            .bind(&bell)
            .bind(&bell)
            .bind(timeout.as_secs_f64())
            .bind(&bell)
            .fetch_one(&mut conn);
        let answer: sqlx::Result<(Option<i64>, Option<i64>)> =
            match tokio::time::timeout(bound, query).await {
                Ok(answer) => answer,
                Err(_) => return Rung::Unavailable,
            };
        match answer {
            Ok((free, got)) => {
                lock_unpoisoned(&self.idle).push((conn, Instant::now()));
                match (free, got) {
                    (Some(0), Some(2)) => Rung::Rang,
                    (Some(0), _) => Rung::Silent,
                    _ => Rung::Unavailable,
                }
            }
            Err(err) => {
                tracing::debug!(error = %err, "omnilock mysql: a bell wait failed; polling");
                Rung::Unavailable
            }
        }
    }

    /// Takes out the wait connections beyond the `keep` used last that
    /// have not been used for `unused_for`, for the caller to close.
    pub(crate) fn unused(&self, keep: usize, unused_for: Duration) -> Vec<MySqlConnection> {
        let mut idle = lock_unpoisoned(&self.idle);
        // Oldest first: the ones at the front came back longest ago.
        let candidates = idle.len().saturating_sub(keep);
        let stale = idle[..candidates]
            .iter()
            .take_while(|(_, back)| back.elapsed() >= unused_for)
            .count();
        idle.drain(..stale).map(|(conn, _)| conn).collect()
    }

    /// Stops the ringer: its connection closes, and with it every bell.
    pub(crate) fn stop(&self) {
        self.ringer.abort();
    }
}

impl Drop for Bells {
    fn drop(&mut self) {
        self.ringer.abort();
    }
}

/// The ringer: carries out the orders on one connection of its own. An
/// uncontended take waits [`TAKE_AFTER`] first, and a free that comes
/// meanwhile cancels it, so that short holds nobody waits for (an
/// uncontended loop) ring nothing; a contended take, and a free of a bell
/// the connection holds, run at once, the free after every take already
/// due (a granted ticket's holder bell before its ticket bell). A failed connection frees every
/// bell it held; the next order connects again.
async fn ring(options: MySqlConnectOptions, mut received: mpsc::UnboundedReceiver<Order>) {
    let mut conn: Option<MySqlConnection> = None;
    let mut takes = Takes::default();
    // How many times this connection holds each bell (`GET_LOCK` nests).
    let mut held: HashMap<String, u32> = HashMap::new();
    loop {
        let due = takes.next_due();
        let order = tokio::select! {
            order = received.recv() => match order {
                Some(order) => Some(order),
                None => return,
            },
            () = sleep_until(due) => None,
        };
        let statements: Vec<Order> = match order {
            Some(Order::Take { bell, now }) => {
                let at = Instant::now();
                takes.push(
                    at.checked_sub(TAKE_AFTER).filter(|_| now).unwrap_or(at),
                    bell,
                );
                continue;
            }
            Some(Order::Free(bell)) => {
                if takes.cancel(&bell) {
                    continue;
                }
                match held.get_mut(&bell) {
                    Some(count) => {
                        *count -= 1;
                        if *count == 0 {
                            held.remove(&bell);
                        }
                        let mut statements = due_takes(&mut takes);
                        statements.push(Order::Free(bell));
                        statements
                    }
                    None => continue,
                }
            }
            None => due_takes(&mut takes),
        };
        for order in statements {
            if conn.is_none() {
                match tokio::time::timeout(RINGER_CONNECT, options.connect())
                    .await
                    .unwrap_or_else(|_| Err(sqlx::Error::PoolTimedOut))
                {
                    Ok(c) => conn = Some(c),
                    Err(err) => {
                        tracing::debug!(error = %err, "omnilock mysql: the bell ringer cannot connect; waiters poll");
                        continue;
                    }
                }
            }
            let Some(c) = conn.as_mut() else { continue };
            let result = match &order {
                Order::Take { bell, .. } => {
                    sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, ?)")
                        .bind(bell)
                        .bind(TAKE_WAIT.as_secs_f64())
                        .fetch_one(&mut *c)
                        .await
                        .map(|got| {
                            if got == Some(1) {
                                *held.entry(bell.clone()).or_default() += 1;
                            }
                        })
                }
                Order::Free(bell) => sqlx::query("DO RELEASE_LOCK(?)")
                    .bind(bell)
                    .execute(&mut *c)
                    .await
                    .map(drop),
            };
            if let Err(err) = result {
                tracing::debug!(error = %err, "omnilock mysql: the bell ringer's connection failed; its bells are free");
                if let Some(c) = conn.take() {
                    let _ = c.close().await;
                }
                held.clear();
            }
        }
    }
}

/// The takes due now, as orders to carry out.
fn due_takes(takes: &mut Takes) -> Vec<Order> {
    takes
        .due(Instant::now())
        .into_iter()
        .map(|bell| Order::Take { bell, now: true })
        .collect()
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}

/// Takes the ringer has not carried out yet, oldest first.
#[derive(Default)]
struct Takes(VecDeque<(Instant, String)>);

impl Takes {
    fn push(&mut self, at: Instant, bell: String) {
        self.0.push_back((at, bell));
    }

    /// A free of `bell` came before its take was carried out: both are
    /// dropped. False if no take of `bell` is waiting.
    fn cancel(&mut self, bell: &str) -> bool {
        match self.0.iter().rposition(|(_, b)| b == bell) {
            Some(i) => {
                self.0.remove(i);
                true
            }
            None => false,
        }
    }

    /// When the next take is due (a contended one, queued behind
    /// uncontended ones, is due at once).
    fn next_due(&self) -> Option<Instant> {
        self.0.iter().map(|(at, _)| *at + TAKE_AFTER).min()
    }

    /// The takes due at `now`, removed, in the order they came.
    fn due(&mut self, now: Instant) -> Vec<String> {
        let mut due = Vec::new();
        self.0.retain(|(at, bell)| {
            let ready = *at + TAKE_AFTER <= now;
            if ready {
                due.push(bell.clone());
            }
            !ready
        });
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_before_the_take_is_due_cancels_it() {
        let t0 = Instant::now();
        let mut takes = Takes::default();
        takes.push(t0, "a".into());
        takes.push(t0, "b".into());
        // `a` was held shorter than TAKE_AFTER: nothing to ring.
        assert!(takes.cancel("a"));
        assert!(!takes.cancel("c"));
        assert!(takes.due(t0).is_empty());
        assert_eq!(takes.next_due(), Some(t0 + TAKE_AFTER));
        assert_eq!(takes.due(t0 + TAKE_AFTER), ["b"]);
        assert!(
            !takes.cancel("b"),
            "b is taken now: its free is a statement"
        );
        // A contended take (due at once) does not wait behind a younger one.
        let t1 = t0 + TAKE_AFTER;
        takes.push(t1, "c".into());
        takes.push(t0, "d".into());
        assert_eq!(takes.next_due(), Some(t1));
        assert_eq!(takes.due(t1), ["d"]);
    }
}
