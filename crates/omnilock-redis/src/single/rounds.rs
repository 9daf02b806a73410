//! The script rounds of one master: an acquire attempt (and its undo when
//! it is not wanted or not confirmed by enough replicas), `lock_all`, the
//! batched renewal and the release, with the ids that make a re-sent call
//! change nothing.

use super::*;
pub(super) enum Attempt {
    Taken(u64),
    Busy(Option<Duration>),
    /// Granted, but fewer replicas than `wait_replicas` confirmed it in
    /// time; the grant is being undone by the task given (if a runtime ran
    /// it).
    Unconfirmed(Error, Option<tokio::task::JoinHandle<()>>),
}

impl RedisStore {
    /// One run of the acquire script. `call` is the same for every attempt
    /// of one acquire, so that an attempt whose grant ran but whose reply
    /// was lost gets that grant back on the next one. A mutex's try-acquire
    /// passes no `entry`; a semaphore's or read-write lock's always does
    /// (the entry id is its acquisition's identity), with `wait` false for
    /// a try.
    pub(super) async fn attempt(
        &self,
        request: &AcquireRequest,
        entry: &str,
        call: &str,
        wait: bool,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        let (scripts, wait_replicas) = (&inner.scripts, inner.options.wait_replicas);
        let (owner, ttl) = (request.owner.as_str(), request.ttl);
        let entry_lease = inner.options.waiter_lease;
        let answer = match Counted::of(request.primitive) {
            None => {
                let keys = self.keys(&request.name);
                let mut conn = self.write_conn(&keys.lock).await;
                let acquire = Acquire {
                    owner,
                    ttl,
                    reentrant: request.reentrant,
                    entry,
                    entry_lease,
                    channel_prefix: &inner.channel_prefix(&keys.lock),
                    call,
                };
                scripts
                    .acquire(&mut conn, &keys, &acquire, wait_replicas)
                    .await
            }
            Some(counted) => {
                // A counted lock's keys only share its slot with the
                // mutex's key, which routes the command.
                let keys = counted.keys(&inner.options.prefix, request);
                let mut conn = self.write_conn(&keys.lock).await;
                let acquire = AcquireCounted {
                    entry,
                    owner,
                    weight: counted.weight(),
                    capacity: counted.capacity(),
                    ttl,
                    entry_lease,
                    wait,
                    channel_prefix: &inner.channel_prefix(&keys.lock),
                };
                scripts
                    .acquire_counted(&mut conn, &keys, &acquire, wait_replicas)
                    .await
            }
        };
        let (answer, confirmed) = answer.map_err(|e| inner.node.err(e))?;
        self.settle(request, entry, answer, confirmed)
    }

    /// What an acquire script's answer means for this attempt (with
    /// `wait_replicas`, `confirmed` replicas acknowledged it).
    pub(super) fn settle(
        &self,
        request: &AcquireRequest,
        entry: &str,
        answer: Acquired,
        confirmed: Option<u32>,
    ) -> Result<Attempt> {
        match answer {
            Acquired::Taken(token) => {
                if let Err(err) = self.check_confirmed(confirmed) {
                    // Not on enough replicas: undo, so that nobody holds a
                    // lock a failover could hand to a second owner. One
                    // call id for every retry of the undo: a retry whose
                    // first run's reply was lost must not drop a second
                    // hold of a reentrant owner.
                    let (store, request, undo) = (self.clone(), request.clone(), nonce());
                    let entry = entry.to_string();
                    let undoing = retry_in_background(move || {
                        let (store, request, undo) = (store.clone(), request.clone(), undo.clone());
                        let entry = entry.clone();
                        async move { store.undo(&request, &entry, token, &undo).await }
                    });
                    return Ok(Attempt::Unconfirmed(err, undoing));
                }
                Ok(Attempt::Taken(token))
            }
            Acquired::HeldNotReentrant => Err(Error::would_deadlock()),
            Acquired::CapacityMismatch(recorded) => Err(Error::permits_conflict(
                recorded as u64,
                Counted::of(request.primitive).map_or(0, |c| c.capacity()),
            )),
            Acquired::EntryReleased => Err(Error::new(
                ErrorKind::Backend,
                "this acquisition's entry was already released",
            )),
            Acquired::Busy(pttl) => Ok(Attempt::Busy(pttl)),
        }
    }

    /// One run of the `lock_all` script over every part: the tokens if all
    /// were free (or taken by an earlier run of `call`), else `None`.
    pub(super) async fn take_all(
        &self,
        requests: &[AcquireRequest],
        call: &str,
    ) -> Result<Option<Vec<u64>>> {
        let inner = &self.inner;
        let first = &requests[0];
        let keys: Vec<Keys> = requests.iter().map(|r| self.keys(&r.name)).collect();
        let mut conn = inner.node.conn_for(&keys[0].lock);
        inner
            .scripts
            .acquire_all(&mut conn, &keys, first.owner.as_str(), first.ttl, call)
            .await
            .map_err(|e| inner.node.err(e))?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Backend,
                    "internal: the lock_all script answered something unexpected",
                )
            })
    }

    /// An attempt that completes even if the caller goes away; a lock it
    /// took for nobody is released at once.
    pub(super) async fn attempt_detached(
        &self,
        request: &AcquireRequest,
        entry: &str,
        call: &str,
        wait: bool,
    ) -> Result<(Attempt, Instant)> {
        let (store, undo) = (self.clone(), self.clone());
        let (call_request, undo_request) = (request.clone(), request.clone());
        let (entry, call) = (entry.to_string(), call.to_string());
        let undo_entry = entry.clone();
        complete_or_undo(
            async move {
                let started = Instant::now();
                store
                    .attempt(&call_request, &entry, &call, wait)
                    .await
                    .map(|a| (a, started))
            },
            move |abandoned| async move {
                if let Ok((Attempt::Taken(token), _)) = abandoned {
                    let _ = undo.undo(&undo_request, &undo_entry, token, &nonce()).await;
                }
            },
        )
        .await
    }

    /// Gives back a grant nobody will use: the mutex's hold (`call` names
    /// this undo, for its retries), or the semaphore's or read-write lock's
    /// `entry`.
    pub(super) async fn undo(
        &self,
        request: &LockSpec,
        entry: &str,
        token: u64,
        call: &str,
    ) -> Result<()> {
        if Counted::of(request.primitive).is_some() {
            return self.cancel_counted(request, entry).await;
        }
        self.release_token(request, token, call).await.map(drop)
    }

    /// With `?wait_replicas=N`: `Unavailable` unless `WAIT` said N
    /// replicas have the write.
    pub(super) fn check_confirmed(&self, acknowledged: Option<u32>) -> Result<()> {
        let (Some(wait), Some(acknowledged)) = (self.inner.options.wait_replicas, acknowledged)
        else {
            return Ok(());
        };
        if acknowledged < wait.replicas {
            return Err(Error::unavailable(format!(
                "only {acknowledged} of {} replicas of {} confirmed the write within {:?} \
                 (wait_replicas, wait_timeout)",
                wait.replicas, self.inner.node.address, wait.timeout
            )));
        }
        Ok(())
    }

    /// One run of the batch renewal script over mutex holds (all on one
    /// server): whether each is still held by its owner and token, and
    /// extended. With `wait_replicas`, a shortfall of confirmations fails
    /// the whole batch (retried).
    pub(super) async fn renew_mutexes(&self, holds: &[(&LockSpec, &Grant)]) -> Result<Vec<bool>> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        let locks: Vec<String> = holds.iter().map(|(r, _)| self.keys(&r.name).lock).collect();
        let renewals: Vec<Renewal> = holds
            .iter()
            .zip(&locks)
            .map(|((request, grant), lock)| Renewal {
                lock,
                owner: request.owner.as_str(),
                token: grant.token,
                ttl: request.ttl,
            })
            .collect();
        let mut conn = self.write_conn(&locks[0]).await;
        let (renewed, confirmed) = inner
            .scripts
            .renew_all(&mut conn, &renewals, inner.options.wait_replicas)
            .await
            .map_err(|e| inner.node.err(e))?;
        let renewed = renewed.ok_or_else(|| {
            Error::new(
                ErrorKind::Backend,
                "internal: the renewal script answered for a different number of locks",
            )
        })?;
        self.check_confirmed(confirmed)?;
        Ok(renewed)
    }

    /// One run of the release script; `call` is the same for every retry
    /// of one hold's release.
    pub(super) async fn release_token(
        &self,
        request: &LockSpec,
        token: u64,
        call: &str,
    ) -> Result<Released> {
        let inner = &self.inner;
        let keys = self.keys(&request.name);
        let mut conn = inner.node.conn_for(&keys.lock);
        let owner = request.owner.as_str();
        let channel_prefix = inner.channel_prefix(&keys.lock);
        inner
            .scripts
            .release(&mut conn, &keys, owner, token, &channel_prefix, call)
            .await
            .map_err(|e| inner.node.err(e))
    }
}

/// A mutex's renewal found another holder, or none.
pub(super) fn lock_gone() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "the lock is no longer held by this owner",
    )
}

/// A fresh call id. A script call may run twice: the cluster connection
/// re-sends a command after a dropped connection, and core retries a
/// release whose reply was lost. One id per acquire (all its attempts) and
/// one per hold's release (all its retries) let the scripts recognise a
/// second run and change nothing (see `scripts/mutex.rs`).
pub(super) fn nonce() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// What a hold's release and renewal name, kept in its grant: the release
/// call id (the mutex), or the entry id (a semaphore permit, a side of a
/// read-write lock); and the store, for a guarded write
/// ([`GuardedWrite`](crate::GuardedWrite)). Opaque outside the crate.
pub struct HoldId {
    pub(super) call: String,
    pub(super) entry: String,
    pub(crate) store: RedisStore,
}

impl RedisStore {
    /// A grant with a fresh release call id and the acquisition's `entry`.
    pub(super) fn granted(&self, token: u64, valid_until: Instant, entry: &str) -> Grant {
        omnilock_core::Grant::new(token, valid_until).with_hold(HoldId {
            call: nonce(),
            entry: entry.to_string(),
            store: self.clone(),
        })
    }

    /// Whether the master of `request`'s lock has as many replicas
    /// connected as `wait_replicas` asks (`INFO replication`); true when it
    /// cannot tell, so that the next attempt finds out.
    pub(super) async fn has_replicas(&self, request: &AcquireRequest) -> bool {
        let Some(wait) = self.inner.options.wait_replicas else {
            return true;
        };
        let keys = self.keys(&request.name);
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let info: redis::RedisResult<String> = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await;
        let Ok(info) = info else { return true };
        info.lines()
            .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
            .and_then(|n| n.parse::<u32>().ok())
            .is_none_or(|connected| connected >= wait.replicas)
    }
}
