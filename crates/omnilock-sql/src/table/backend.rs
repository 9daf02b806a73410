//! The lock-table mode's [`Backend`]: mutexes by the atomic statements of
//! [`super::queue`], semaphores and read-write locks by
//! [`super::counted`].

use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backend, Backoff, Capabilities, Error, ErrorKind, Inspection, Listed, LockKind,
    LockName, LockSpec, Owner, Primitive, Result, async_trait, complete_or_undo,
};
use sqlx::Row;

use super::TableStore;
use super::queue::{Attempt, Ticket};
use crate::conn::{query, with_pool};
use crate::queries::Args;
use crate::store::{Grant, SqlHold, row_grant};

/// Fair mode: the waiters at the front of the line that poll at the line's
/// pace rather than slowing down to `max_poll`.
const FAST_LINE: i64 = 8;

impl TableStore {
    /// Fair mode on MySQL/MariaDB: waits until this waiter heads the line,
    /// each time on the bell of the waiter just ahead, which rings when
    /// that one leaves the line (see `bells.rs`). One hand-off so wakes one
    /// waiter, where a wait on the holder's bell would wake the whole line,
    /// each of which would spend statements to learn it is not first. True
    /// if it waited at all: the lock may have changed hands meanwhile.
    async fn wait_for_head(
        &self,
        request: &AcquireRequest,
        ticket: &mut Ticket,
        backoff: &mut Backoff,
        patience: Duration,
    ) -> bool {
        let mut waited = false;
        loop {
            self.refresh(ticket).await;
            let Ok((_, Some(ahead))) = self.ahead(request, ticket.id).await else {
                return waited;
            };
            waited = true;
            // The one ahead is this client's: its leaving wakes this
            // waiter in process, with no connection spent on a bell.
            if self.inner.line.is_local(&request.name, ahead) {
                let _ = tokio::time::timeout(patience, ticket.wake.notified()).await;
                continue;
            }
            // Unrung (the one ahead has no bell yet, or crashed and its
            // ticket lives out its lease), the pace slows as a poll's.
            if self
                .wait_behind(ahead, backoff.next_delay(), patience)
                .await
            {
                backoff.reset();
            }
        }
    }
}

#[async_trait]
impl Backend for TableStore {
    type Hold = SqlHold;

    fn kind(&self) -> &'static str {
        TableStore::kind(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_fair(self.inner.config.fair)
            // MySQL/MariaDB's bells push mutex hand-offs only; its
            // semaphores and read-write locks poll.
            .with_push_wakeups(self.inner.config.listens())
            .with_fencing(true)
            .with_cross_process_reentrancy(true)
            .with_lease_renewal(true)
            .with_cross_process(true)
            .with_break_lock(true)
            .with_holder(true)
            .with_check(true)
            .with_guarded_write(true)
            .with_election(true)
            // A committed row survives a restart of the server; a
            // failover to an asynchronous replica is outside what the
            // library sees (docs/backends/sql.md).
            .with_survives_failover(true)
            .with_semaphore(true)
            .with_rw_lock(true)
            .with_atomic_lock_all(true)
            // Rows and entries are read by the database's clock; the fair
            // line's tickets are the mutex's waiters, which without it
            // poll and leave no trace.
            .with_inspect(true)
            .with_inspect_waiters(self.inner.config.fair)
            .with_list(true)
            // In `<table>_records`, timed by the database's clock.
            .with_records(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        if request.primitive != Primitive::Mutex {
            return self.take_counted(request, false).await;
        }
        match self.attempt_detached(request, false, None).await? {
            (Attempt::Taken { token }, started) => {
                let bell = self.took(&request.name, false);
                Ok(Some(row_grant(self, token, started + request.ttl, bell)))
            }
            (Attempt::Busy { .. }, _) => Ok(None),
        }
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        if self.inner.config.fair {
            self.settle_tickets().await;
        }
        let (store, undo_store) = (self.clone(), self.clone());
        let (call_requests, undo_requests) = (requests.to_vec(), requests.to_vec());
        let (tokens, started) = complete_or_undo(
            async move {
                let started = Instant::now();
                let tokens = store.take_all(&call_requests).await?;
                Ok((tokens, started))
            },
            // Taken for a caller that has gone: give every part back.
            move |abandoned: Result<(Option<Vec<u64>>, Instant)>| async move {
                if let Ok((Some(tokens), _)) = abandoned {
                    for (request, token) in undo_requests.iter().zip(tokens) {
                        let _ = undo_store
                            .release_row(&request.name, &request.owner, token)
                            .await;
                    }
                }
            },
        )
        .await?;
        Ok(tokens.map(|tokens| {
            requests
                .iter()
                .zip(tokens)
                .map(|(request, token)| {
                    let bell = self.took(&request.name, false);
                    row_grant(self, token, started + request.ttl, bell)
                })
                .collect()
        }))
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        if request.primitive != Primitive::Mutex {
            return self.take_counted(request, true).await?.ok_or_else(|| {
                Error::new(ErrorKind::Backend, "a waiting acquire returned nothing")
            });
        }
        let notify = self.local_notify(&request.name);
        let mut backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_poll);
        // Fair mode: our place in line, given up (in the background) when
        // this future ends, whether granted, failed or dropped.
        let mut ticket: Option<Ticket> = None;
        // Fair mode: how many waiters were ahead of us at the last look.
        let mut last_ahead: Option<i64> = None;
        // Whether the lock was busy at any look.
        let mut waited = false;
        loop {
            // Listen before looking, so a release between the two is not
            // missed. Fair mode: a waiter with a ticket is woken on its own.
            let wake = ticket
                .as_ref()
                .map_or_else(|| notify.clone(), |t| t.wake.clone());
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let id = ticket.as_ref().map(|t| t.id);
            let max_poll = self.inner.config.max_poll;
            // How long to poll next, and how long a bell may keep us.
            let (delay, patience) = match self.attempt_detached(request, true, id).await {
                Ok((Attempt::Taken { token }, started)) => {
                    // The holder's bell is asked for before the ticket's
                    // goes, so the next head finds it taken.
                    let bell = self.took(&request.name, waited);
                    if let Some(ticket) = ticket {
                        ticket.granted();
                    }
                    return Ok(row_grant(self, token, started + request.ttl, bell));
                }
                Ok((Attempt::Busy { .. }, _)) if self.inner.config.fair && ticket.is_none() => {
                    waited = true;
                    match self.enqueue(request).await {
                        Ok(queued) => {
                            ticket = Some(queued);
                            request.waiting.raise();
                            // Look again at once: the lock may have freed
                            // meanwhile.
                            continue;
                        }
                        // Taking a place in line is retried like a look.
                        Err(err) if err.is_retryable() => {
                            tracing::debug!(error = %err, lock = %request.name, "omnilock sql: cannot join the line yet; retrying");
                            let delay = backoff.next_delay();
                            (delay, delay)
                        }
                        Err(err) => return Err(err),
                    }
                }
                Ok((Attempt::Busy { remaining }, _)) => {
                    waited = true;
                    if let Some(ticket) = &mut ticket {
                        // MySQL/MariaDB: a waiter behind others waits for
                        // its turn on the bell of the one ahead, and looks
                        // again once it heads the line.
                        if self.has_bells() {
                            if self
                                .wait_for_head(request, ticket, &mut backoff, max_poll)
                                .await
                            {
                                continue;
                            }
                        } else {
                            self.refresh(ticket).await;
                        }
                        // The front of the line polls as often as the line
                        // moves: its pace starts over each time a waiter
                        // ahead has gone. Without a push, a head that had
                        // slowed down to `max_poll` while it waited learnt
                        // of its turn up to `max_poll` late, on every
                        // hand-off (8 clients on their own connections: 13
                        // grants/s). Only the front: a long line whose
                        // every waiter sped up at each hand-off would be a
                        // polling herd. PostgreSQL's NOTIFY names the head
                        // of the line, so its waiters need no count to keep
                        // pace (the poll is only the safety net there).
                        if !self.inner.config.listens()
                            && !self.has_bells()
                            && let Ok((ahead, _)) = self.ahead(request, ticket.id).await
                        {
                            if ahead < FAST_LINE && last_ahead.is_some_and(|last| ahead < last) {
                                backoff.reset();
                            }
                            last_ahead = Some(ahead);
                        }
                    }
                    request.waiting.raise();
                    // Wake when a crashed holder's lease runs out, not later.
                    let until_expiry = |wait: Duration| {
                        remaining.map_or(wait, |r| wait.min(r + Duration::from_millis(1)))
                    };
                    (until_expiry(backoff.next_delay()), until_expiry(max_poll))
                }
                Err(err) if err.is_retryable() => {
                    tracing::debug!(error = %err, lock = %request.name, "omnilock sql poll failed; retrying");
                    let delay = backoff.next_delay();
                    (delay, delay)
                }
                Err(err) => return Err(err),
            };
            let (woken_here, rang) = tokio::select! {
                _ = &mut woken => (true, false),
                rang = self.wait_for_release(&request.name, delay, patience) => (false, rang),
            };
            if woken_here || rang {
                backoff.reset();
            }
        }
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        if spec.primitive != Primitive::Mutex {
            return self.release_counted(spec, grant).await;
        }
        let released = self
            .release_row(&spec.name, &spec.owner, grant.token)
            .await?;
        // Ours or not any more, the row is done with: so is its bell. (A
        // release that keeps failing leaves the bell taken until the store
        // closes; waiters on the name then look once per `max_poll`.)
        self.freed(spec, grant);
        if released {
            Ok(())
        } else {
            Err(Error::not_owner())
        }
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        if spec.primitive != Primitive::Mutex {
            return self.renew_counted(spec, grant).await;
        }
        let started = Instant::now();
        let args = Args {
            name: spec.name.as_str(),
            owner: spec.owner.as_str(),
            ttl_ms: spec.ttl.as_millis() as i64,
            token: grant.token as i64,
            ..Args::default()
        };
        if self.execute(&self.inner.queries.renew, &args).await? == 0 {
            self.freed(spec, grant);
            return Err(Error::new(
                ErrorKind::LockLost,
                "the lock is no longer held by this owner",
            ));
        }
        Ok(started + spec.ttl)
    }

    /// Mutexes in batches (see [`TableStore::renew_holds`]).
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        self.renew_holds(holds).await
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let broken = self.execute(&self.inner.queries.break_lock, &args).await? > 0;
        if broken {
            self.wake_local(name);
        }
        Ok(broken)
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        self.break_counted(name, kind, owner).await
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        self.inspect_lock(name, kind).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        self.list_held(prefix).await
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        self.set_record(name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<omnilock_core::Record>> {
        self.get_record(name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        self.del_record(name).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<omnilock_core::Holder>> {
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.err(e);
        let row: Option<(String, i64)> = with_pool!(&self.inner.pool, p => {
            match query(&self.inner.queries.holder, &args).fetch_optional(p).await.map_err(err)? {
                Some(row) => Some((row.try_get(0).map_err(err)?, row.try_get(1).map_err(err)?)),
                None => None,
            }
        });
        row.map(|(owner, token)| {
            Ok(omnilock_core::Holder::new(
                omnilock_core::Owner::new(&owner)?,
                token as u64,
            ))
        })
        .transpose()
    }

    async fn close(&self) {
        // A fair waiter that gave up leaves its ticket in the background;
        // left behind, it would stop every try-acquire of the lock until
        // its lease ran out (a process that exits right after a timeout).
        self.settle_tickets().await;
        self.stop_background();
        self.inner.pool.close().await;
    }
}
