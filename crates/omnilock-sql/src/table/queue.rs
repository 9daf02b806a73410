//! The acquisition recipe on the lock table: one atomic statement takes a
//! free (or expired, or re-entered) lock; a waiter polls it, woken early by
//! a local release or a PostgreSQL NOTIFY. In fair mode a waiter first takes
//! a ticket in the waiting line, and only the head of the line may take the
//! lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Error, ErrorKind, LockName, Result, complete_or_undo, lock_unpoisoned,
};
use sqlx::Row;
use tokio::sync::Notify;

use super::TableStore;
use crate::conn::{query, with_pool};
use crate::queries::{Acquire, Args};

/// A place in the fair waiting line; dropping it leaves the line.
pub(crate) struct Ticket {
    pub(crate) id: i64,
    pub(crate) store: TableStore,
    pub(crate) refreshed: Instant,
    name: LockName,
    /// This waiter's own wake-up: a release wakes only the oldest ticket
    /// of this client (see [`LocalLine`]).
    pub(crate) wake: Arc<Notify>,
    /// Leaving without the lock (cancelled, timed out, failed): a wake-up
    /// this waiter may have swallowed goes on to the next one.
    pass_on: bool,
}

impl Ticket {
    /// The waiter took the lock: it leaves the line with nothing to pass on.
    pub(crate) fn granted(mut self) {
        self.pass_on = false;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let line = &self.store.inner.line;
        line.leave(&self.name, self.id);
        if self.pass_on {
            line.wake_head(&self.name);
        }
        let (store, id) = (self.store.clone(), self.id);
        // A granted waiter's ticket row went in the statement that took
        // the lock; any other's goes now, before the waiter behind hears.
        if !self.pass_on {
            store.left_line(&self.name, id);
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            store.left_line(&self.name, id);
            return;
        }
        self.store.inner.leaving.fetch_add(1, Ordering::SeqCst);
        let name = self.name.clone();
        omnilock_core::spawn_cleanup(async move {
            store.dequeue(id).await;
            store.left_line(&name, id);
            if store.inner.leaving.fetch_sub(1, Ordering::SeqCst) == 1 {
                store.inner.left.notify_waiters();
            }
        });
    }
}

/// Fair mode: this client's waiters that hold a ticket, per lock, in ticket
/// order. Only the head of the whole line may take a freed lock, and of
/// this client's waiters only the oldest can be that head: a release (or a
/// PostgreSQL NOTIFY) wakes that one alone, not every waiter, each of which
/// would spend a few statements to learn it is not first.
#[derive(Default)]
pub(crate) struct LocalLine {
    lines: Mutex<HashMap<LockName, BTreeMap<i64, Arc<Notify>>>>,
}

impl LocalLine {
    fn join(&self, name: &LockName, id: i64) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        lock_unpoisoned(&self.lines)
            .entry(name.clone())
            .or_default()
            .insert(id, wake.clone());
        wake
    }

    fn leave(&self, name: &LockName, id: i64) {
        let mut lines = lock_unpoisoned(&self.lines);
        if let Some(line) = lines.get_mut(name) {
            line.remove(&id);
            if line.is_empty() {
                lines.remove(name);
            }
        }
    }

    /// Wakes this client's waiter of `name` holding ticket `id`, if any.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wake_ticket(&self, name: &LockName, id: i64) {
        let lines = lock_unpoisoned(&self.lines);
        if let Some(waiter) = lines.get(name).and_then(|line| line.get(&id)) {
            waiter.notify_one();
        }
    }

    /// Whether ticket `id` of `name` is one of this client's waiters.
    pub(crate) fn is_local(&self, name: &LockName, id: i64) -> bool {
        let lines = lock_unpoisoned(&self.lines);
        lines.get(name).is_some_and(|line| line.contains_key(&id))
    }

    /// Ticket `id` of `name` left the line: wakes this client's waiter
    /// just behind it, if any, which may now head the line.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn wake_behind(&self, name: &LockName, id: i64) {
        let lines = lock_unpoisoned(&self.lines);
        if let Some((_, next)) = lines.get(name).and_then(|line| line.range(id + 1..).next()) {
            next.notify_one();
        }
    }

    /// Wakes this client's oldest waiter of `name`, if any.
    pub(crate) fn wake_head(&self, name: &LockName) {
        let lines = lock_unpoisoned(&self.lines);
        if let Some(head) = lines.get(name).and_then(|line| line.values().next()) {
            head.notify_one();
        }
    }
}

pub(crate) enum Attempt {
    Taken { token: u64 },
    Busy { remaining: Option<Duration> },
}

impl TableStore {
    /// The atomic statement(s) that take the lock: `Some(token)` if taken.
    pub(crate) async fn take(
        &self,
        request: &AcquireRequest,
        ticket: Option<i64>,
    ) -> Result<Option<u64>> {
        let inner = &self.inner;
        let args = Args {
            name: request.name.as_str(),
            owner: request.owner.as_str(),
            ttl_ms: request.ttl.as_millis() as i64,
            reentrant: request.reentrant as i64,
            // Without a ticket (try-acquire, or a first look) any live
            // ticket is ahead.
            ticket: ticket.unwrap_or(i64::MAX),
            ..Args::default()
        };
        let err = |e| self.err(e);
        match (&inner.queries.acquire, &inner.pool) {
            (Acquire::Upsert(statement), pool) => with_pool!(pool, p => {
                let row = query(statement, &args).fetch_optional(p).await.map_err(err)?;
                row.map(|row| row.try_get::<i64, _>(0).map(|t| t as u64))
                    .transpose()
                    .map_err(err)
            }),
            #[cfg(feature = "mysql")]
            (Acquire::UpdateThenInsert { update, insert }, crate::conn::Pool::MySql(p)) => {
                let updated = query(update, &args).execute(p).await.map_err(err)?;
                if updated.rows_affected() == 1 {
                    return Ok(Some(updated.last_insert_id()));
                }
                let inserted = query(insert, &args).execute(p).await.map_err(err)?;
                Ok((inserted.rows_affected() == 1).then_some(1))
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::new(
                ErrorKind::Backend,
                "internal: statements of another dialect",
            )),
        }
    }

    /// `lock_all`'s one transaction: the acquire statement of every part, in
    /// the requests' (sorted) order; the tokens if all were taken, else
    /// `None` and the transaction rolled back. Parts wait for each other's
    /// row locks only briefly, and in one order, so two of these cannot
    /// deadlock.
    pub(crate) async fn take_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<u64>>> {
        let inner = &self.inner;
        fn args_of(request: &AcquireRequest) -> Args<'_> {
            Args {
                name: request.name.as_str(),
                owner: request.owner.as_str(),
                ttl_ms: request.ttl.as_millis() as i64,
                reentrant: 0,
                // Any live ticket of fair mode's line is ahead of this try.
                ticket: i64::MAX,
                ..Args::default()
            }
        }
        let err = |e| self.err(e);
        let begin = inner.queries.begin;
        let mut tokens = Vec::with_capacity(requests.len());
        match (&inner.queries.acquire, &inner.pool) {
            (Acquire::Upsert(statement), pool) => with_pool!(pool, p => {
                let mut tx = p.begin_with(begin).await.map_err(err)?;
                for request in requests {
                    let row = query(statement, &args_of(request))
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(err)?;
                    match row {
                        Some(row) => tokens.push(row.try_get::<i64, _>(0).map_err(err)? as u64),
                        None => {
                            tx.rollback().await.map_err(err)?;
                            return Ok(None);
                        }
                    }
                }
                tx.commit().await.map_err(err)?;
            }),
            #[cfg(feature = "mysql")]
            (Acquire::UpdateThenInsert { update, insert }, crate::conn::Pool::MySql(p)) => {
                let mut tx = p.begin_with(begin).await.map_err(err)?;
                for request in requests {
                    let args = args_of(request);
                    let updated = query(update, &args).execute(&mut *tx).await.map_err(err)?;
                    if updated.rows_affected() == 1 {
                        tokens.push(updated.last_insert_id());
                        continue;
                    }
                    let inserted = query(insert, &args).execute(&mut *tx).await.map_err(err)?;
                    if inserted.rows_affected() != 1 {
                        tx.rollback().await.map_err(err)?;
                        return Ok(None);
                    }
                    tokens.push(1);
                }
                tx.commit().await.map_err(err)?;
            }
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::new(
                    ErrorKind::Backend,
                    "internal: statements of another dialect",
                ));
            }
        }
        Ok(Some(tokens))
    }

    /// One atomic attempt to take the lock; `waiting` when it comes from a
    /// waiting acquire (which then marks the row as waited for).
    pub(crate) async fn attempt(
        &self,
        request: &AcquireRequest,
        waiting: bool,
        ticket: Option<i64>,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        if let Some(token) = self.take(request, ticket).await? {
            // Leave the line in the same (cancellation-proof) call that took
            // the lock, so no one behind ever sees a granted waiter's ticket.
            if let Some(id) = ticket {
                self.dequeue(id).await;
            }
            return Ok(Attempt::Taken { token });
        }
        let args = Args {
            name: request.name.as_str(),
            lease_ms: inner.config.waiting_mark.as_millis() as i64,
            ..Args::default()
        };
        let err = |e| self.err(e);
        let (owner, remaining, marked) = with_pool!(&inner.pool, p => {
            match query(&inner.queries.probe, &args).fetch_optional(p).await.map_err(err)? {
                Some(row) => (
                    row.try_get::<Option<String>, _>(0).map_err(err)?,
                    row.try_get::<Option<i64>, _>(1).map_err(err)?,
                    row.try_get::<Option<i64>, _>(2).map_err(err)?,
                ),
                None => (None, None, None),
            }
        });
        // A waiter keeps the row marked as waited for (so releases send
        // NOTIFY), writing only when the mark is half gone: most polls of a
        // busy lock stay read-only.
        if waiting && inner.config.listens() && marked.is_none_or(|left| left < args.lease_ms / 2) {
            self.execute(&inner.queries.mark_waiting, &args).await?;
        }
        if owner.as_deref() == Some(request.owner.as_str()) && !request.reentrant {
            return Err(Error::would_deadlock());
        }
        Ok(Attempt::Busy {
            remaining: remaining.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        })
    }

    /// Waits (briefly) until this client's abandoned tickets are deleted.
    pub(crate) async fn settle_tickets(&self) {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while inner.leaving.load(Ordering::SeqCst) > 0 {
            let left = inner.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if inner.leaving.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, left).await.is_err() {
                break;
            }
        }
    }

    /// An attempt that runs to completion even if the caller is cancelled;
    /// a lock it took for a caller that has gone is released at once.
    pub(crate) async fn attempt_detached(
        &self,
        request: &AcquireRequest,
        waiting: bool,
        ticket: Option<i64>,
    ) -> Result<(Attempt, Instant)> {
        if self.inner.config.fair {
            self.settle_tickets().await;
        }
        let store = self.clone();
        let undo_store = self.clone();
        let call_request = request.clone();
        let undo_request = request.clone();
        complete_or_undo(
            async move {
                let started = Instant::now();
                store
                    .attempt(&call_request, waiting, ticket)
                    .await
                    .map(|attempt| (attempt, started))
            },
            move |abandoned| async move {
                if let Ok((Attempt::Taken { token }, _)) = abandoned {
                    let _ = undo_store
                        .release_row(&undo_request.name, &undo_request.owner, token)
                        .await;
                }
            },
        )
        .await
    }

    /// Takes a ticket in the fair waiting line. A ticket whose insert
    /// completes after the caller has gone is removed at once.
    pub(crate) async fn enqueue(&self, request: &AcquireRequest) -> Result<Ticket> {
        let tickets = self.inner.queries.tickets.clone().expect("fair mode");
        let lease = self.inner.config.waiting_mark;
        let (store, undo_store) = (self.clone(), self.clone());
        let (name, owner) = (request.name.clone(), request.owner.clone());
        let id = complete_or_undo(
            async move {
                let args = Args {
                    name: name.as_str(),
                    owner: owner.as_str(),
                    lease_ms: lease.as_millis() as i64,
                    ..Args::default()
                };
                // Dead tickets stop counting when their lease ends; the
                // sweep only keeps the table small, so one enqueue in 16
                // runs it.
                if rand::random::<u8>().is_multiple_of(16) {
                    let _ = store.execute(&tickets.sweep, &args).await;
                }
                let err = |e| store.err(e);
                match &store.inner.pool {
                    #[cfg(feature = "mysql")]
                    crate::conn::Pool::MySql(p) => {
                        let done = query(&tickets.enqueue, &args)
                            .execute(p)
                            .await
                            .map_err(err)?;
                        Ok(done.last_insert_id() as i64)
                    }
                    #[allow(unreachable_patterns)] // when MySQL is the only dialect built
                    pool => with_pool!(pool, p => {
                        let row = query(&tickets.enqueue, &args).fetch_one(p).await.map_err(err)?;
                        row.try_get::<i64, _>(0).map_err(err)
                    }),
                }
            },
            move |abandoned: Result<i64>| async move {
                if let Ok(id) = abandoned {
                    undo_store.dequeue(id).await;
                }
            },
        )
        .await?;
        self.joined_line(id);
        Ok(Ticket {
            id,
            store: self.clone(),
            refreshed: Instant::now(),
            name: request.name.clone(),
            wake: self.inner.line.join(&request.name, id),
            pass_on: true,
        })
    }

    /// Keeps a waiter's ticket alive while it polls.
    pub(crate) async fn refresh(&self, ticket: &mut Ticket) {
        let lease = self.inner.config.waiting_mark;
        if ticket.refreshed.elapsed() < lease / 3 {
            return;
        }
        let tickets = self.inner.queries.tickets.as_ref().expect("fair mode");
        let started = Instant::now();
        let args = Args {
            lease_ms: lease.as_millis() as i64,
            id: ticket.id,
            ..Args::default()
        };
        let refreshed = self.execute(&tickets.heartbeat, &args).await;
        if refreshed.is_ok() {
            ticket.refreshed = started;
        }
    }

    /// How many live tickets of `request`'s lock are older than ticket
    /// `id`, and the youngest of them: the waiter just ahead.
    pub(crate) async fn ahead(
        &self,
        request: &AcquireRequest,
        id: i64,
    ) -> Result<(i64, Option<i64>)> {
        let tickets = self.inner.queries.tickets.as_ref().expect("fair mode");
        let args = Args {
            name: request.name.as_str(),
            id,
            ..Args::default()
        };
        let err = |e| self.err(e);
        with_pool!(&self.inner.pool, p => {
            let row = query(&tickets.ahead, &args).fetch_one(p).await.map_err(err)?;
            Ok((
                row.try_get::<i64, _>(0).map_err(err)?,
                row.try_get::<Option<i64>, _>(1).map_err(err)?,
            ))
        })
    }

    pub(crate) async fn dequeue(&self, id: i64) {
        if let Some(tickets) = &self.inner.queries.tickets {
            let args = Args {
                id,
                ..Args::default()
            };
            let _ = self.execute(&tickets.dequeue, &args).await;
        }
    }
}
