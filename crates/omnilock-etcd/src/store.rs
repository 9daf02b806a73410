//! [`EtcdStore`]: the [`Backend`] over one etcd cluster, in either mode:
//! its sessions, release, renewal and reads here; each mode's acquisition in
//! `store/recipe.rs` and `store/lockapi.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use omnilock_core::{
    async_trait, lock_unpoisoned as lock, AcquireRequest, Backend, Capabilities, Error, ErrorKind,
    Grant, Holder, LockName, Owner, Result, SessionsPerTtl,
};

mod counted;
mod detached;
mod hold;
mod lockapi;
mod recipe;

use detached::put_txn_detached;
use hold::{grant, Held};

use crate::builder::EtcdBuilder;
use crate::config::{EtcdConfig, Mode};
use crate::conn::Etcd;
use crate::queue::{abandon, gets, revision};
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
        let resp = put_txn_detached(&self.etcd, txn, keys).await?;
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
                .map(|(request, (_, key))| grant(request, key, rev, session.clone(), None))
                .collect(),
        ))
    }
}

/// How many released lock-protocol leases to keep per TTL.
const IDLE_LEASES: usize = 16;

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
            return counted::acquire(
                &self.etcd,
                self.shared_session(request.ttl).await?,
                request,
                false,
            )
            .await;
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
                counted::acquire(
                    &self.etcd,
                    self.shared_session(request.ttl).await?,
                    request,
                    true,
                )
                .await?
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
            return counted::release(&self.etcd, &held.key, held.rev).await;
        }
        hold::release_mutex(&self.etcd, held).await?;
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
        hold::renew(&self.etcd, request, grant).await
    }

    async fn renew_all(&self, holds: &[(&AcquireRequest, &Grant)]) -> Vec<Result<Instant>> {
        hold::renew_all(&self.etcd, holds).await
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
