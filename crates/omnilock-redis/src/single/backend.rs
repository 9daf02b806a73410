//! One master as a [`Backend`]: try-acquire, acquire (waits woken by one
//! message, re-checked on a backoff), `lock_all`, release, renewal, holder,
//! break, inspection, listing and records.

use super::*;
use omnilock_core::{Inspection, Listed, LockKind, Owner, Record};
#[async_trait]
impl Backend for RedisStore {
    type Hold = HoldId;

    fn kind(&self) -> &'static str {
        self.inner.kind
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_fair(true)
            .with_push_wakeups(true)
            .with_fencing(true)
            .with_cross_process_reentrancy(true)
            .with_lease_renewal(true)
            .with_cross_process(true)
            .with_break_lock(true)
            .with_holder(true)
            .with_check(true)
            .with_guarded_write(true)
            .with_election(true)
            // Replication is asynchronous, persistence optional.
            .with_survives_failover(false)
            .with_semaphore(true)
            .with_rw_lock(true)
            // Every kind's holders, each read in one script; a mutex's
            // waiters without their owners (its line keeps entries only).
            .with_inspect(true)
            .with_inspect_waiters(true)
            // SCAN of every master.
            .with_list(true)
            // One key each beside the lock, timed out by the server.
            .with_records(true)
            // One script over every part's keys: one server or Sentinel's
            // master. A cluster keeps each name in its own slot, and
            // `wait_replicas` confirms one lock per write.
            .with_atomic_lock_all(
                matches!(self.inner.channels, WakeChannels::PerClient { .. })
                    && self.inner.options.wait_replicas.is_none(),
            )
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        if !self.capabilities().atomic_lock_all || requests.is_empty() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "this deployment takes a set part by part",
            ));
        }
        let (store, undo) = (self.clone(), self.clone());
        let (call_requests, undo_requests) = (requests.to_vec(), requests.to_vec());
        let (tokens, started) = complete_or_undo(
            async move {
                let started = Instant::now();
                let tokens = store.take_all(&call_requests, &nonce()).await?;
                Ok((tokens, started))
            },
            // Taken for a caller that has gone: give every part back.
            move |abandoned: Result<(Option<Vec<u64>>, Instant)>| async move {
                if let Ok((Some(tokens), _)) = abandoned {
                    for (request, token) in undo_requests.iter().zip(tokens) {
                        let _ = undo.release_token(request, token, &nonce()).await;
                    }
                }
            },
        )
        .await?;
        Ok(tokens.map(|tokens| {
            requests
                .iter()
                .zip(tokens)
                .map(|(request, token)| self.granted(token, started + request.ttl, ""))
                .collect()
        }))
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let entry = match Counted::of(request.primitive) {
            None => String::new(),
            Some(_) => self.new_entry(),
        };
        match self
            .attempt_detached(request, &entry, &nonce(), false)
            .await?
        {
            (Attempt::Taken(token), started) => {
                Ok(Some(self.granted(token, started + request.ttl, &entry)))
            }
            (Attempt::Busy(_), _) => Ok(None),
            (Attempt::Unconfirmed(err, _), _) => Err(err),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let inner = &self.inner;
        let entry = self.new_entry();
        let notify = Arc::new(Notify::new());
        lock_unpoisoned(&inner.waiters).insert(entry.clone(), notify.clone());
        let mut place = Place {
            store: self.clone(),
            request: request.clone(),
            entry: entry.clone(),
            granted: false,
            joined: None,
        };
        let mut call = nonce();
        let recheck = inner.options.waiter_lease / 3;
        let mut backoff = Backoff::new(Duration::from_millis(10), recheck);
        let mut unconfirmed = false;
        let mut by_message = true;
        // An attempt already made by a wait blocked in the server.
        let mut made: Option<Result<(Attempt, Instant)>> = None;
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // After a grant the replicas could not confirm, take no other
            // until the master has the replicas again: each would be
            // granted and undone, waiting `wait_timeout` every time.
            if unconfirmed {
                if !self.has_replicas(request).await {
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                unconfirmed = false;
            }
            let attempt = match made.take() {
                Some(made) => made,
                None => self.attempt_detached(request, &entry, &call, true).await,
            };
            let mut busy = false;
            let delay = match attempt {
                Ok((Attempt::Taken(token), started)) => {
                    place.granted = true;
                    if !by_message {
                        // Granted on a re-check: the release's message may
                        // have been lost to a subscription that died
                        // silently. Subscribe again on the next wait.
                        self.suspect_channel(&place);
                    }
                    return Ok(self.granted(token, started + request.ttl, &entry));
                }
                Ok((Attempt::Busy(remaining), _)) => {
                    if self.listen_for(&mut place).await {
                        // Queued before the subscription: a release may
                        // have published to nobody. Look again now.
                        continue;
                    }
                    request.waiting.raise();
                    backoff.reset();
                    busy = true;
                    // Re-check in case a wake-up is lost, jittered so that
                    // waiters do not poll together; and at the holder's
                    // expiry, if it dies without releasing.
                    let jitter = rand::thread_rng().gen_range(0.8..1.0);
                    let delay = recheck.mul_f64(jitter);
                    remaining.map_or(delay, |r| delay.min(r + Duration::from_millis(1)))
                }
                Ok((Attempt::Unconfirmed(err, undoing), _)) => {
                    tracing::warn!(error = %err, "omnilock redis: grant not confirmed by the replicas; waiting for them");
                    // The next attempt must not find this grant (its call
                    // id would hand it back while the undo frees it): wait
                    // for the undo, and go on under a new call id.
                    if let Some(undoing) = undoing {
                        let _ = undoing.await;
                    }
                    call = nonce();
                    unconfirmed = true;
                    backoff.next_delay()
                }
                Err(err) if err.is_retryable() => backoff.next_delay(),
                Err(err) => return Err(err),
            };
            if busy && self.blocks_in_server(request) {
                made = self.attempt_after_wake(request, &entry, &call, delay).await;
                if made.is_some() {
                    continue;
                }
            }
            by_message = tokio::select! {
                _ = &mut woken => true,
                _ = tokio::time::sleep(delay) => false,
            };
        }
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        let id = &grant.hold;
        let released = match Counted::of(spec.primitive) {
            None => {
                let released = self.release_token(spec, grant.token, &id.call).await?;
                released != Released::NotOwner
            }
            Some(_) => self.release_counted(spec, &id.entry, grant.token).await?,
        };
        if !released {
            return Err(Error::not_owner());
        }
        Ok(())
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        if Counted::of(spec.primitive).is_some() {
            let id = &grant.hold;
            let started = Instant::now();
            if self.renew_counted(spec, &id.entry, grant.token).await? {
                return Ok(started + spec.ttl);
            }
            return Err(Error::new(
                ErrorKind::LockLost,
                "the permit or read-write lock is no longer held by this owner",
            ));
        }
        let started = Instant::now();
        if self.renew_mutexes(&[(spec, grant)]).await? == [true] {
            Ok(started + spec.ttl)
        } else {
            Err(lock_gone())
        }
    }

    /// Mutexes share one script run per batch on one server (a cluster's
    /// locks live in different slots: each is renewed on its own there);
    /// semaphore permits and read-write locks are renewed each on its own.
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let started = Instant::now();
        let batched = |spec: &LockSpec| {
            Counted::of(spec.primitive).is_none() && !self.inner.node.is_cluster()
        };
        let (mutexes, others): (Vec<usize>, Vec<usize>) =
            (0..holds.len()).partition(|&i| batched(holds[i].0));
        let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
        let each = futures_util::future::join_all(
            others.iter().map(|&i| self.renew(holds[i].0, holds[i].1)),
        );
        let batch: Vec<_> = mutexes.iter().map(|&i| holds[i]).collect();
        let (each, batch) = tokio::join!(each, self.renew_mutexes(&batch));
        for (&i, result) in others.iter().zip(each) {
            results[i] = Some(result);
        }
        match batch {
            Ok(renewed) => {
                for (&i, renewed) in mutexes.iter().zip(renewed) {
                    results[i] = Some(if renewed {
                        Ok(started + holds[i].0.ttl)
                    } else {
                        Err(lock_gone())
                    });
                }
            }
            Err(err) => {
                for &i in &mutexes {
                    results[i] = Some(Err(err.clone()));
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
            })
            .collect()
    }

    async fn holder(&self, name: &LockName) -> Result<Option<omnilock_core::Holder>> {
        let keys = self.keys(name);
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let (owner, token): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(&keys.lock)
            .arg("owner")
            .arg("token")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.inner.node.err(e))?;
        match (owner, token) {
            (Some(owner), Some(token)) => Ok(Some(omnilock_core::Holder::new(
                omnilock_core::Owner::new(&owner)?,
                token,
            ))),
            _ => Ok(None),
        }
    }

    /// Breaks the lock of the holder seen now: a second run of the script
    /// (a re-send) cannot break the next holder's.
    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let Some(holder) = self.holder(name).await? else {
            return Ok(false);
        };
        let inner = &self.inner;
        let keys = self.keys(name);
        let mut conn = inner.node.conn_for(&keys.lock);
        let channel_prefix = inner.channel_prefix(&keys.lock);
        inner
            .scripts
            .break_lock(&mut conn, &keys, &channel_prefix, holder.token)
            .await
            .map_err(|e| inner.node.err(e))
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
        self.list_locks(prefix).await
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        self.set_record(name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        self.get_record(name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        self.del_record(name).await
    }
}
