//! Guarded writes in etcd: the compare that makes an application's own
//! `Txn` apply only while its lock is held.

use etcd_client::{Compare, CompareOp};
use omnilock_core::{LockGuard, Result, mutex_grant};

use crate::store::Held;

/// The compare that holds only while `guard` holds its mutex: the key it
/// acquired still exists with the create revision it was granted
/// (`CreateRevision(key) == revision`). Put it in the `when` of your own
/// `Txn`, and the `Txn`'s writes apply in one atomic step with the check,
/// or not at all (`succeeded()` false). This is the guard etcd's own
/// `concurrency.Mutex` gives through `IsOwner()`.
///
/// Mutexes of an etcd store, in both modes. `Unsupported` for a semaphore
/// permit, a side of a read-write lock, or a guard of another store.
///
/// ```no_run
/// # async fn demo(client: omnilock_etcd::etcd_client::Client) -> omnilock_core::Result<()> {
/// use omnilock_etcd::{EtcdStore, etcd_client::{Txn, TxnOp}};
///
/// let locks = EtcdStore::builder(client.clone()).build().await?;
/// let guard = locks.acquire("config/publisher").await?;
/// let txn = Txn::new()
///     .when([omnilock_etcd::is_owner(&guard)?])
///     .and_then([TxnOp::put("config/current", "v42", None)]);
/// let applied = client.kv_client().txn(txn).await.unwrap().succeeded();
/// // false: the lock was lost, and nothing was written.
/// # let _ = applied; Ok(()) }
/// ```
pub fn is_owner(guard: &LockGuard) -> Result<Compare> {
    let held = mutex_grant::<Held>(guard, "an owner compare", "an etcd store")?;
    Ok(Compare::create_revision(
        held.hold.key(),
        CompareOp::Equal,
        held.hold.create_revision(),
    ))
}
