//! [`EtcdStore`]: the [`Backend`] over one etcd cluster, in either mode:
//! its sessions, release, renewal and reads here; each mode's acquisition in
//! `store/recipe.rs` and `store/lockapi.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use omnilock_core::{
    async_trait, complete_or_undo, lock_unpoisoned as lock, retry, AcquireRequest, Backend,
    Backoff, Capabilities, Error, ErrorKind, Grant, Holder, LockName, Owner, Result,
    SessionsPerTtl,
};

mod counted;
mod lockapi;
mod recipe;

use crate::builder::EtcdBuilder;
use crate::config::{EtcdConfig, Mode};
use crate::conn::Etcd;
use crate::queue::{abandon, first_created, gets, hold_count, revision, Enqueued, Turn};
use crate::session::{revoke_in_background, Session};

/// Locks in an etcd cluster (v3 API). See `docs/backends/etcd.md`. Open it
/// from a URL as below, or on the application's own client with
/// [`EtcdStore::builder`].
///
/// ```no_run
/// # async fn demo() -> omnilock_core::Result<()> {
/// use omnilock_core::{Locks, StoreUrl};
/// use omnilock_etcd::{EtcdConfig, EtcdStore};
/// let url = StoreUrl::parse("etcd://127.0.0.1:2379,127.0.0.1:22379/app")?;
/// let locks = Locks::new(EtcdStore::connect(EtcdConfig::from_url(&url)?).await?);
/// let guard = locks.acquire("reports/nightly").await?;
/// println!("fencing token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct EtcdStore {
    etcd: Etcd,
    mode: Mode,
    /// Recipe mode: one shared lease per TTL asked for.
    sessions: SessionsPerTtl<Session>,
    /// Lock-protocol mode: one lease per acquisition, remembered to close them.
    own_sessions: Mutex<Vec<std::sync::Weak<Session>>>,
    /// Lock-protocol mode: leases whose acquisition was released, kept alive for
    /// the next acquisition with the same TTL (a grant, a keep-alive stream
    /// and a revoke fewer per acquisition).
    idle: Mutex<HashMap<Duration, Vec<Arc<Session>>>>,
}

/// What a grant carries to release and renew it.
struct Held {
    key: String,
    rev: i64,
    session: Arc<Session>,
    ticket: u64,
    /// Set when the key lives on another client's lease: the same owner
    /// re-entered a lock it holds in another process.
    foreign_lease: Option<i64>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.etcd.shown)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects; fails with `Unavailable` if no endpoint answers within the
    /// connect timeout and with `InvalidConfig` on refused credentials.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let etcd = Etcd::connect(&config).await?;
        Ok(Self::open(etcd, config.options.mode))
    }

    /// Starts building a store on the application's own `client` (its
    /// endpoints, credentials and TLS settings). See [`EtcdBuilder`].
    pub fn builder(client: etcd_client::Client) -> EtcdBuilder {
        EtcdBuilder::new(client)
    }

    /// The one way a store is made, from a URL or from a builder.
    pub(crate) fn open(etcd: Etcd, mode: Mode) -> Self {
        EtcdStore {
            etcd,
            mode,
            sessions: SessionsPerTtl::new(|session| session.death().is_none()),
            own_sessions: Mutex::new(Vec::new()),
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// The shared session for `ttl`, granting a new lease if there is none
    /// or the last one died.
    async fn shared_session(&self, ttl: Duration) -> Result<Arc<Session>> {
        self.sessions
            .get(ttl, || Session::grant(&self.etcd, ttl))
            .await
    }

    /// A session for one lock-protocol acquisition.
    async fn own_session(&self, ttl: Duration) -> Result<Arc<Session>> {
        let reused = lock(&self.idle).get_mut(&ttl).and_then(|idle| {
            idle.retain(|s| s.death().is_none());
            idle.pop()
        });
        if let Some(session) = reused {
            return Ok(session);
        }
        let session = Session::grant(&self.etcd, ttl).await?;
        let mut own = lock(&self.own_sessions);
        own.retain(|s| s.strong_count() > 0);
        own.push(Arc::downgrade(&session));
        Ok(session)
    }

    fn grant(
        &self,
        request: &AcquireRequest,
        key: String,
        rev: i64,
        session: Arc<Session>,
        foreign: Option<(i64, Instant)>,
    ) -> Grant {
        let ticket = session.register(&request.lost);
        let valid_until = match foreign {
            Some((_, until)) => until.min(session.safe_until()),
            None => session.safe_until(),
        };
        Grant::new(rev as u64, valid_until).with_state(Held {
            key,
            rev,
            session,
            ticket,
            foreign_lease: foreign.map(|(lease, _)| lease),
        })
    }

    /// The enqueue, retried over transient errors and finished in the
    /// background if the caller goes away (then its key is deleted).
    async fn enqueue_safely(&self, lock_prefix: &str, key: &str, lease: i64) -> Result<Enqueued> {
        let store = self.etcd.clone();
        let this = EnqueueCall {
            store: self.clone_handle(),
            lock_prefix: lock_prefix.to_string(),
            key: key.to_string(),
            lease,
        };
        let undo_key = key.to_string();
        complete_or_undo(this.run(), move |result: Result<Enqueued>| async move {
            if let Ok(Enqueued::Mine { rev, .. }) = result {
                abandon(&store, undo_key, rev);
            }
        })
        .await
    }

    /// Runs a transaction that puts `keys` when it succeeds, retried over
    /// transient errors and finished even if the caller goes away (then
    /// the keys it put are deleted in the background).
    async fn put_txn_detached(
        &self,
        txn: Txn,
        keys: Vec<String>,
    ) -> Result<etcd_client::TxnResponse> {
        let (etcd, undo_etcd) = (self.etcd.clone(), self.etcd.clone());
        complete_or_undo(
            async move {
                let deadline = tokio::time::Instant::now() + etcd.request_timeout;
                retry(backoff(), deadline, || etcd.txn(txn.clone())).await
            },
            move |result: Result<etcd_client::TxnResponse>| async move {
                if let Ok(resp) = result {
                    if resp.succeeded() {
                        for key in keys {
                            abandon(&undo_etcd, key, revision(&resp));
                        }
                    }
                }
            },
        )
        .await
    }

    /// A try-acquire's single transaction: put our key only if the lock's
    /// range is empty (nobody holds or waits). `None` when it is not and our
    /// owner is not the holder.
    async fn try_put(&self, lock_prefix: &str, key: &str, lease: i64) -> Result<Option<Enqueued>> {
        let txn = Txn::new()
            .when([Compare::create_revision(lock_prefix, CompareOp::Equal, 0).with_prefix()])
            .and_then([TxnOp::put(
                key,
                "1",
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([
                TxnOp::get(key, None),
                TxnOp::get(lock_prefix, Some(first_created())),
            ]);
        let call_key = key.to_string();
        let resp = self.put_txn_detached(txn, vec![key.to_string()]).await?;
        if resp.succeeded() {
            return Ok(Some(Enqueued::Mine {
                rev: revision(&resp),
                turn: Turn::Held,
            }));
        }
        let mut gets = gets(&resp);
        let mine = gets.next().and_then(|kvs| kvs.into_iter().next());
        let first = gets.next().and_then(|kvs| kvs.into_iter().next());
        let Some(mine) = mine else { return Ok(None) };
        let is_first = first.is_some_and(|f| f.create_revision() == mine.create_revision());
        if mine.lease() == lease {
            // Left by a retried attempt of ours: keep it if it holds.
            let rev = mine.create_revision();
            if is_first {
                return Ok(Some(Enqueued::Mine {
                    rev,
                    turn: Turn::Held,
                }));
            }
            abandon(&self.etcd, call_key, rev);
            return Ok(None);
        }
        Ok(Some(Enqueued::Elsewhere {
            kv: mine,
            first: is_first,
        }))
    }

    /// `lock_all`'s one transaction: every part's key, on the shared
    /// session's lease, only if every part's range is empty (nobody holds
    /// or waits). The parts share the transaction's revision as their
    /// create revision, hence as their token. A retried transaction whose
    /// first try had succeeded finds our own keys: then they are ours.
    async fn try_put_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        /// etcd refuses a transaction of more than 128 operations (its
        /// default `--max-txn-ops`); a larger set goes part by part.
        const MOST_PARTS: usize = 64;
        let Some(first) = requests.first() else {
            return Ok(Some(Vec::new()));
        };
        if requests.len() > MOST_PARTS || self.mode != Mode::Recipe {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "this set goes part by part (etcd's Lock RPC, or more than 64 parts)",
            ));
        }
        let session = self.shared_session(first.ttl).await?;
        let parts: Vec<(String, String)> = requests
            .iter()
            .map(|request| {
                let prefix = self.etcd.lock_prefix(request.name.as_str());
                let key = Etcd::owner_key(&prefix, request.owner.as_str());
                (prefix, key)
            })
            .collect();
        let lease = session.id;
        let txn = Txn::new()
            .when(
                parts
                    .iter()
                    .map(|(prefix, _)| {
                        Compare::create_revision(prefix.as_str(), CompareOp::Equal, 0).with_prefix()
                    })
                    .collect::<Vec<_>>(),
            )
            .and_then(
                parts
                    .iter()
                    .map(|(_, key)| {
                        TxnOp::put(key.as_str(), "1", Some(PutOptions::new().with_lease(lease)))
                    })
                    .collect::<Vec<_>>(),
            )
            .or_else(
                parts
                    .iter()
                    .map(|(_, key)| TxnOp::get(key.as_str(), None))
                    .collect::<Vec<_>>(),
            );
        let keys = parts.iter().map(|(_, key)| key.clone()).collect();
        let resp = self.put_txn_detached(txn, keys).await?;
        let rev = if resp.succeeded() {
            revision(&resp)
        } else {
            // Ours from a first try that succeeded (all of them, as it was
            // one transaction), or none: then the set is busy.
            let mine: Vec<i64> = gets(&resp)
                .filter_map(|kvs| kvs.into_iter().next())
                .filter(|kv| kv.lease() == lease)
                .map(|kv| kv.create_revision())
                .collect();
            match mine.first() {
                Some(&rev) if mine.len() == parts.len() && mine.iter().all(|&r| r == rev) => rev,
                _ => {
                    for ((_, key), rev) in parts.iter().zip(mine) {
                        abandon(&self.etcd, key.clone(), rev);
                    }
                    return Ok(None);
                }
            }
        };
        Ok(Some(
            requests
                .iter()
                .zip(parts)
                .map(|(request, (_, key))| self.grant(request, key, rev, session.clone(), None))
                .collect(),
        ))
    }

    /// A cheap copy sharing the connection, for background work.
    fn clone_handle(&self) -> Etcd {
        self.etcd.clone()
    }
}

/// The enqueue as an owned future (it may outlive the caller).
struct EnqueueCall {
    store: Etcd,
    lock_prefix: String,
    key: String,
    lease: i64,
}

impl EnqueueCall {
    async fn run(self) -> Result<Enqueued> {
        let deadline = tokio::time::Instant::now() + self.store.request_timeout * 2;
        let result = retry(backoff(), deadline, || {
            self.store.enqueue(&self.lock_prefix, &self.key, self.lease)
        })
        .await;
        if result.is_err() {
            // An attempt may have been applied without us hearing back: a
            // key on our lease would otherwise sit in the queue for as long
            // as the lease lives.
            let txn = Txn::new()
                .when([Compare::lease(
                    self.key.as_str(),
                    CompareOp::Equal,
                    self.lease,
                )])
                .and_then([TxnOp::delete(self.key.as_str(), None)]);
            if let Err(e) = self.store.txn(txn).await {
                tracing::warn!(error = %e, "omnilock etcd could not clean up after a failed enqueue");
            }
        }
        result
    }
}

/// How many released lock-protocol leases to keep per TTL.
const IDLE_LEASES: usize = 16;

fn backoff() -> Backoff {
    Backoff::new(Duration::from_millis(20), Duration::from_millis(500))
}

#[async_trait]
impl Backend for EtcdStore {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: true,
            push_wakeups: true,
            fencing: true,
            cross_process_reentrancy: self.mode == Mode::Recipe,
            lease_renewal: true,
            cross_process: true,
            break_lock: true,
            holder: self.mode == Mode::Recipe,
            election: self.mode == Mode::Recipe,
            // Raft: a grant is committed on a majority of members.
            survives_failover: true,
            semaphore: true,
            rw_lock: true,
            atomic_lock_all: self.mode == Mode::Recipe,
        }
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        if counted::Counted::of(request.primitive).is_some() {
            return self.acquire_counted(request, false).await;
        }
        match self.mode {
            Mode::Recipe => self.acquire_recipe(request, false).await,
            Mode::LockApi => self.acquire_lockapi(request, false).await,
        }
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        self.try_put_all(requests).await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let granted = match self.mode {
            _ if counted::Counted::of(request.primitive).is_some() => {
                self.acquire_counted(request, true).await?
            }
            Mode::Recipe => self.acquire_recipe(request, true).await?,
            Mode::LockApi => self.acquire_lockapi(request, true).await?,
        };
        granted.ok_or_else(|| Error::new(ErrorKind::Backend, "a waiting acquire returned nothing"))
    }

    async fn release(&self, request: &AcquireRequest, grant: &Grant) -> Result<()> {
        let held = grant.backend_state::<Held>()?;
        held.session.unregister(held.ticket);
        if counted::Counted::of(request.primitive).is_some() {
            return self.release_counted(&held.key, held.rev).await;
        }
        let key = held.key.as_str();
        let mut uncertain = false;
        let mut backoff = backoff();
        let deadline = tokio::time::Instant::now() + self.etcd.request_timeout * 2;
        loop {
            // The common case in one round trip: the last hold goes.
            let txn = Txn::new()
                .when([
                    Compare::create_revision(key, CompareOp::Equal, held.rev),
                    Compare::value(key, CompareOp::Equal, "1"),
                ])
                .and_then([TxnOp::delete(key, None)])
                .or_else([TxnOp::get(key, None)]);
            let resp = match self.etcd.txn(txn).await {
                Ok(resp) => resp,
                Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    uncertain = true;
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if resp.succeeded() {
                break;
            }
            let kv = gets(&resp)
                .next()
                .and_then(|kvs| kvs.into_iter().next())
                .filter(|kv| kv.create_revision() == held.rev);
            let Some(kv) = kv else {
                // Gone: taken over, expired or broken, unless it was our own
                // earlier attempt that deleted it.
                if uncertain {
                    break;
                }
                return Err(Error::not_owner());
            };
            let count = hold_count(&kv);
            if count <= 1 {
                // A key of etcd's lock protocol (empty value) or a count
                // changed under us.
                if self.etcd.delete_if_created(key, held.rev).await? {
                    break;
                }
                continue;
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key,
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::put(
                    key,
                    (count - 1).to_string(),
                    Some(PutOptions::new().with_ignore_lease()),
                )]);
            if self.etcd.txn(txn).await?.succeeded() {
                break;
            }
        }
        if self.mode == Mode::LockApi {
            // Our key is gone, so the lease holds nothing: keep it for the
            // next acquisition, up to a few per TTL.
            let mut idle = lock(&self.idle);
            let pool = idle.entry(request.ttl).or_default();
            if pool.len() < IDLE_LEASES && held.session.death().is_none() {
                pool.push(held.session.clone());
            } else {
                revoke_in_background(&self.etcd, held.session.id);
            }
        }
        Ok(())
    }

    async fn renew(&self, request: &AcquireRequest, grant: &Grant) -> Result<Instant> {
        let held = grant.backend_state::<Held>()?;
        if let Some(cause) = held.session.death() {
            return Err(cause.with_retryable(false));
        }
        let key = held.key.clone();
        let resp = self
            .etcd
            .call(|mut c| async move { c.get(key, None).await })
            .await?;
        let present = resp
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == held.rev);
        if !present {
            return Err(key_gone());
        }
        match held.foreign_lease {
            Some(lease) => Ok(self
                .foreign_valid_until(lease, request.ttl)
                .await?
                .min(held.session.safe_until())),
            None => Ok(held.session.safe_until()),
        }
    }

    /// Holds on this client's own lease (the usual case) are checked up to
    /// 64 per `Txn` (etcd allows 128 operations in one); the lease itself
    /// is kept alive by the session. Others are renewed each on its own.
    async fn renew_all(&self, holds: &[(&AcquireRequest, &Grant)]) -> Vec<Result<Instant>> {
        let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
        let own: Vec<(usize, &Held)> = holds
            .iter()
            .enumerate()
            .filter_map(|(i, (_, grant))| {
                let held = grant.backend_state::<Held>().ok()?;
                (held.foreign_lease.is_none() && held.session.death().is_none())
                    .then_some((i, held))
            })
            .collect();
        for batch in own.chunks(RENEW_BATCH) {
            let ops: Vec<TxnOp> = batch
                .iter()
                .map(|(_, held)| {
                    TxnOp::get(held.key.clone(), Some(GetOptions::new().with_keys_only()))
                })
                .collect();
            let checked = self.etcd.txn(Txn::new().and_then(ops)).await;
            let found: Vec<Vec<etcd_client::KeyValue>> = match &checked {
                Ok(resp) => gets(resp).collect(),
                Err(_) => Vec::new(),
            };
            for (n, (i, held)) in batch.iter().enumerate() {
                results[*i] = Some(match &checked {
                    Err(err) => Err(err.clone()),
                    Ok(_) => {
                        let present = found
                            .get(n)
                            .and_then(|kvs| kvs.first())
                            .is_some_and(|kv| kv.create_revision() == held.rev);
                        if present {
                            Ok(held.session.safe_until())
                        } else {
                            Err(key_gone())
                        }
                    }
                });
            }
        }
        for (i, (request, grant)) in holds.iter().enumerate() {
            if results[i].is_none() {
                results[i] = Some(self.renew(request, grant).await);
            }
        }
        results.into_iter().flatten().collect()
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let lock_prefix = self.etcd.lock_prefix(name.as_str());
        let Some(holder) = self.etcd.holder(&lock_prefix).await? else {
            return Ok(false);
        };
        let key = String::from_utf8_lossy(holder.key()).into_owned();
        self.etcd
            .delete_if_created(&key, holder.create_revision())
            .await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        if self.mode == Mode::LockApi {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "etcd's lock protocol does not record owners (use the default mode)",
            ));
        }
        let lock_prefix = self.etcd.lock_prefix(name.as_str());
        let Some(kv) = self.etcd.holder(&lock_prefix).await? else {
            return Ok(None);
        };
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let owner = match key
            .strip_prefix(&lock_prefix)
            .and_then(|k| k.strip_prefix("o:"))
        {
            Some(encoded) => percent_encoding::percent_decode_str(encoded)
                .decode_utf8()
                .ok()
                .and_then(|o| Owner::new(&o).ok()),
            None => None,
        };
        // A key from `etcdctl lock` (a lease ID) names no owner we know.
        let owner = match owner {
            Some(owner) => owner,
            None => Owner::new(&format!("lease:{}", key.rsplit('/').next().unwrap_or("?")))?,
        };
        Ok(Some(Holder {
            owner,
            token: kv.create_revision() as u64,
        }))
    }

    async fn close(&self) {
        let shared = self.sessions.take_all();
        lock(&self.idle).clear();
        let own: Vec<_> = lock(&self.own_sessions)
            .drain(..)
            .filter_map(|s| s.upgrade())
            .collect();
        for session in shared.into_iter().chain(own) {
            session.close(&self.etcd).await;
        }
    }
}

/// Holds checked by one renewal `Txn` at most.
const RENEW_BATCH: usize = 64;

/// A renewal found the hold's key gone, or another in its place.
fn key_gone() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "the lock's key is gone from etcd (lease expired or lock broken)",
    )
}
