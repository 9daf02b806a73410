//! [`EtcdStore`], the entry point: it picks the [`Backend`] of the
//! configured [`Mode`], `RecipeStore` (omnilock's recipe, the default) or
//! `LockApiStore` (etcd's lock protocol), each a type of its own.

mod base;
mod counted;
mod detached;
mod hold;
mod inspect;
mod leases;
mod lock_all;
mod lockapi;
mod recipe;
mod records;

use std::{
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use omnilock_core::{
    AcquireRequest, Backend, Capabilities, Holder, HolderChange, Inspection, Listed, LockKind,
    LockName, LockSpec, Locks, Owner, Record, Result, async_trait,
};

use crate::builder::EtcdBuilder;
use crate::config::{EtcdConfig, Mode};
use crate::conn::Etcd;
pub use hold::Held;
use lockapi::LockApiStore;
use recipe::RecipeStore;

/// A grant of an etcd store: its token, and the key and revision its
/// release and renewal name.
type Grant = omnilock_core::Grant<Held>;

/// Locks in an etcd cluster (v3 API). See [docs/backends/etcd.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/etcd.md). Open it
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
///
/// A thin entry point: connecting picks the store of the configured
/// [`Mode`] (omnilock's recipe, or etcd's lock protocol with `?mode=lockapi`
/// or [`EtcdBuilder::mode`]), and every [`Backend`] call goes to it.
/// [`connect`](crate::connect) and [`EtcdBuilder::build`] hand that store
/// to [`Locks`] directly.
pub struct EtcdStore {
    /// The store of the configured mode.
    backend: Arc<dyn Backend<Hold = Held>>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.backend.fmt(f)
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

    /// The one way a store is made, from a URL or from a builder: the
    /// mode's own [`Backend`].
    pub(crate) fn open(etcd: Etcd, mode: Mode) -> Self {
        let backend: Arc<dyn Backend<Hold = Held>> = match mode {
            Mode::Recipe => Arc::new(RecipeStore::new(etcd)),
            Mode::LockApi => Arc::new(LockApiStore::new(etcd)),
        };
        EtcdStore { backend }
    }

    /// A [`Locks`] handle on this store.
    pub(crate) fn into_locks(self) -> Locks {
        Locks::new(self)
    }
}

/// Every call goes to the mode's store.
#[async_trait]
impl Backend for EtcdStore {
    type Hold = Held;

    fn kind(&self) -> &'static str {
        self.backend.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// A mutex's key names its owner (`o:<owner>`): a new owner per
    /// acquisition would write a new key, and leave one more deleted key
    /// for every later read of the lock's range to walk until etcd
    /// compacts. A released hold's key is deleted, so its owner may come
    /// back.
    fn reuses_owners(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        self.backend.try_acquire(request).await
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        self.backend.try_acquire_all(requests).await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        self.backend.acquire(request).await
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        self.backend.release(spec, grant).await
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        self.backend.renew(spec, grant).await
    }

    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        self.backend.renew_all(holds).await
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        self.backend.break_lock(name).await
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        self.backend.break_holds(name, kind, owner).await
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        self.backend.inspect(name, kind).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        self.backend.list(prefix).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        self.backend.holder(name).await
    }

    async fn watch_holder(&self, name: &LockName) -> Result<Option<HolderChange>> {
        self.backend.watch_holder(name).await
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        self.backend.write_record(name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        self.backend.read_record(name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        self.backend.delete_record(name).await
    }

    async fn close(&self) {
        self.backend.close().await
    }
}
