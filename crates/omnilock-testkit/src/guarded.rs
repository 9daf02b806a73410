//! What a test binary gives the guarded-write scenarios: a way to write in
//! the store itself, conditional on a mutex (see
//! `Capabilities::guarded_write`), through the store's own guard API (SQL's
//! `TxGuard`, etcd's `is_owner`, ZooKeeper's `OwnerCheck`).

use omnilock_core::{LockGuard, Result, async_trait};

/// An application's records in the lock's store, written under a lock.
#[async_trait]
pub trait GuardedWrites: Send + Sync {
    /// The write of `record` guarded by `guard`'s hold, prepared while the
    /// guard holds; each [`GuardedWrite::write`] applies it, or not, by
    /// whether the hold still is the lock's at that moment.
    fn prepare(&self, guard: &LockGuard, record: &str) -> Result<Box<dyn GuardedWrite>>;

    /// The value the last applied write left in `record`, if any.
    async fn read(&self, record: &str) -> Result<Option<u64>>;
}

/// One prepared guarded write.
#[async_trait]
pub trait GuardedWrite: Send + Sync {
    /// Writes `value`: `Ok(true)` applied, `Ok(false)` refused by the
    /// guard (the hold has ended), nothing written.
    async fn write(&self, value: u64) -> Result<bool>;
}
