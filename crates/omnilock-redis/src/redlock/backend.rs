//! Redlock as a [`Backend`]: try-acquire, acquire (rounds until a
//! majority grants), release, renewal, break, inspection, listing and
//! records.

use super::*;
use omnilock_core::{Inspection, Listed, LockKind, Record};
#[async_trait]
impl Backend for RedlockStore {
    type Hold = Hold;

    fn kind(&self) -> &'static str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            // First come, first served by ticket: the nodes' median clock
            // when the waiter first found the lock busy.
            .with_fair(true)
            .with_push_wakeups(true)
            .with_fencing(false)
            .with_cross_process_reentrancy(true)
            .with_lease_renewal(true)
            .with_cross_process(true)
            .with_break_lock(true)
            .with_holder(false)
            .with_election(false)
            // A node restarted without persistence can hand a majority
            // to a second client (docs/backends/redis.md#redlock).
            .with_survives_failover(false)
            .with_semaphore(false)
            .with_rw_lock(false)
            .with_atomic_lock_all(false)
            // The majority view of the nodes (`inspect.rs`): holder and
            // waiters in line, never exact.
            .with_inspect(true)
            .with_inspect_waiters(true)
            // SCAN of every node, each name found then read on all.
            .with_list(true)
            // On every node; present where any node keeps it
            // (`records.rs`).
            .with_records(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let (mut outcome, undo) = self.round_detached(request, None, true).await;
        if let Ok(Outcome::Busy { own: true, .. }) = outcome {
            // This owner holds it somewhere: the script decides between
            // re-entry and deadlock, after the fast round's undo.
            if let Some(undo) = undo {
                let _ = undo.await;
            }
            outcome = self.round_detached(request, None, false).await.0;
        }
        match outcome? {
            Outcome::Held {
                tokens,
                token,
                valid_until,
                ..
            } => Ok(Some(Self::grant(token, tokens, valid_until))),
            Outcome::Busy { .. } => Ok(None),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let inner = &self.inner;
        let entry = self.new_entry();
        let waiter = Arc::new(Waiter::default());
        lock_unpoisoned(&inner.waiters).insert(entry.clone(), waiter.clone());
        let mut place = Place {
            store: self.clone(),
            name: request.name.clone(),
            entry: entry.clone(),
            queued: false,
            granted_on: None,
        };
        let mut ticket = None;
        let mut tried_fast = false;
        let mut undoing: Option<tokio::task::JoinHandle<()>> = None;
        let recheck = inner.options.waiter_lease / 3;
        let mut backoff = Backoff::new(Duration::from_millis(10), recheck);
        loop {
            if let Some(undo) = undoing.take() {
                let _ = undo.await;
            }
            waiter.woken_by.store(0, Ordering::Relaxed);
            let turn = Turn {
                entry: &entry,
                ticket,
            };
            // A newcomer's first round is the fast one; once the lock was
            // found taken, rounds run the script, which queues.
            let fast = ticket.is_none() && !tried_fast;
            tried_fast = true;
            let (outcome, undo) = self.round_detached(request, Some(turn), fast).await;
            undoing = undo;
            let delay = match outcome {
                Ok(Outcome::Held {
                    tokens,
                    answered,
                    token,
                    valid_until,
                }) => {
                    // The nodes not waited for leave the line too: one that
                    // found the lock busy queued this waiter there.
                    place.granted_on = Some(answered);
                    return Ok(Self::grant(token, tokens, valid_until));
                }
                Ok(Outcome::Busy { clocks, .. }) if fast && clocks.is_empty() => continue,
                Ok(Outcome::Busy {
                    clocks, remaining, ..
                }) => {
                    if ticket.is_none() {
                        // The first busy round: take a ticket and queue at
                        // once with it.
                        ticket = median(clocks);
                        place.queued = ticket.is_some();
                        if place.queued {
                            continue;
                        }
                    }
                    request.waiting.raise();
                    backoff.reset();
                    // Look again in case wake-ups are lost (which also keeps
                    // this waiter's place), jittered so that waiters do not
                    // poll together; and at the holder's expiry, if it dies
                    // without releasing.
                    let delay = recheck.mul_f64(rand::thread_rng().gen_range(0.8..1.0));
                    remaining.map_or(delay, |r| delay.min(r + Duration::from_millis(1)))
                }
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "omnilock redlock round failed; retrying");
                    backoff.next_delay()
                }
                Err(e) => return Err(e),
            };
            self.wait_turn(&waiter, delay).await;
        }
    }

    /// Held until now only if a majority still had this owner's key: a
    /// release that found it on fewer nodes is a loss the holder must hear
    /// of (another client may have held the lock meanwhile), even though it
    /// cleaned up what was left.
    ///
    /// A retry (core retries an `Unavailable` release) sends only to the
    /// nodes not settled yet, and counts the earlier confirmations. A node
    /// whose earlier release went unanswered and which now has no key at
    /// all counts as released while the hold is still valid: the key cannot
    /// have expired yet, so that earlier release ran (a paused node runs
    /// its queued commands when it resumes). Found by pausing 3 of 5 nodes
    /// during a release: every retry was refused and a lock nobody else
    /// could have taken was reported lost.
    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        let hold = &grant.hold;
        let before = lock_unpoisoned(&hold.released).clone();
        let send: NodeTokens = hold
            .tokens
            .iter()
            .zip(&before)
            .map(|(token, done)| match done {
                NodeRelease::NotSent | NodeRelease::Unanswered => *token,
                NodeRelease::Done | NodeRelease::Lost => None,
            })
            .collect();
        // Answered once a majority confirmed: the slower nodes have their
        // release sent and run it (see `release_on_until`).
        let done = before.iter().filter(|s| **s == NodeRelease::Done).count();
        let enough = self.quorum().saturating_sub(done).max(1);
        let answers = self.release_tokens(spec, &send, Some(enough)).await;
        let still_valid = Instant::now() < *lock_unpoisoned(&hold.valid_until);
        let after: Vec<NodeRelease> = before
            .iter()
            .zip(answers)
            .map(|(was, answer)| match (answer, was) {
                (None, was) => *was,
                (Some(NodeAnswer::Released), _) => NodeRelease::Done,
                (Some(NodeAnswer::Absent), NodeRelease::Unanswered) if still_valid => {
                    NodeRelease::Done
                }
                (Some(NodeAnswer::Absent | NodeAnswer::NotOwner), _) => NodeRelease::Lost,
                (Some(NodeAnswer::NoAnswer), _) => NodeRelease::Unanswered,
            })
            .collect();
        let count = |state: NodeRelease| after.iter().filter(|s| **s == state).count();
        let (released, unanswered) = (count(NodeRelease::Done), count(NodeRelease::Unanswered));
        *lock_unpoisoned(&hold.released) = after;
        let (quorum, nodes) = (self.quorum(), self.inner.node_count);
        if released >= quorum {
            return Ok(());
        }
        if released + unanswered < quorum {
            return Err(Error::new(
                ErrorKind::NotOwner,
                format!(
                    "the lock was lost: this owner still held it on {released} of {nodes} \
                     nodes, and a majority is {quorum} (expired or taken over)"
                ),
            ));
        }
        Err(Error::unavailable(format!(
            "release confirmed on {released} of {nodes} nodes and {unanswered} did not \
             answer: whether the lock was still held is unknown"
        )))
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        self.renew_all(&[(spec, grant)])
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
    }

    /// One script run per node extends every hold of the batch that node
    /// granted; a hold is renewed when a majority extended it within its
    /// validity, as for one lock.
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let inner = &self.inner;
        let started = Instant::now();
        let calls = inner.nodes.iter().enumerate().map(|(n, node)| {
            // The holds this node granted, with its token for each.
            let granted: Vec<(usize, u64)> = holds
                .iter()
                .enumerate()
                .filter_map(|(i, (_, grant))| {
                    let token = grant.hold.tokens.get(n).copied().flatten()?;
                    Some((i, token))
                })
                .collect();
            let mut conn = node.conn.clone();
            let timeout = inner.options.response_timeout;
            async move {
                if granted.is_empty() {
                    return (granted, None);
                }
                let locks: Vec<String> = granted
                    .iter()
                    .map(|&(i, _)| Keys::new(&inner.options.prefix, holds[i].0.name.as_str()).lock)
                    .collect();
                let renewals: Vec<Renewal> = granted
                    .iter()
                    .zip(&locks)
                    .map(|(&(i, token), lock)| Renewal {
                        lock,
                        owner: holds[i].0.owner.as_str(),
                        token,
                        ttl: holds[i].0.ttl,
                    })
                    .collect();
                let renew = inner.scripts.redlock_renew_all(&mut conn, &renewals);
                let renewed = tokio::time::timeout(timeout, renew)
                    .await
                    .ok()
                    .and_then(|a| a.ok())
                    .flatten();
                (granted, renewed)
            }
        });
        let (mut extended, mut refused) = (vec![0; holds.len()], vec![0; holds.len()]);
        for (granted, answer) in join_all(calls).await {
            let Some(answer) = answer.filter(|a| a.len() == granted.len()) else {
                continue;
            };
            for (&(i, _), renewed) in granted.iter().zip(answer) {
                if renewed {
                    extended[i] += 1;
                } else {
                    refused[i] += 1;
                }
            }
        }
        let elapsed = started.elapsed();
        holds
            .iter()
            .enumerate()
            .map(|(i, (request, grant))| {
                if extended[i] >= self.quorum() && elapsed + Self::drift(request.ttl) < request.ttl
                {
                    let valid_until = started + request.ttl - Self::drift(request.ttl);
                    *lock_unpoisoned(&grant.hold.valid_until) = valid_until;
                    return Ok(valid_until);
                }
                if refused[i] > inner.node_count - self.quorum() {
                    return Err(Error::new(
                        ErrorKind::LockLost,
                        "a majority of nodes no longer holds the lock for this owner",
                    ));
                }
                Err(Error::unavailable(format!(
                    "only {} Redlock nodes extended the lease",
                    extended[i]
                )))
            })
            .collect()
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, name);
        let calls = inner.nodes.iter().map(|node| {
            let mut conn = node.conn.clone();
            let keys = &keys;
            async move {
                inner
                    .scripts
                    .redlock_break(&mut conn, keys, &inner.channel_prefix)
                    .await
            }
        });
        let results = join_all(calls).await;
        Ok(results.iter().any(|r| matches!(r, Ok(true))))
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        if kind != LockKind::Mutex {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "Redlock offers no semaphores or read-write locks",
            ));
        }
        self.inspect_lock(name).await
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
