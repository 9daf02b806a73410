//! Guarded writes in ZooKeeper: the check that makes an application's own
//! `multi` apply only while its lock is held.

use omnilock_core::{Error, LockGuard, Result, mutex_grant};
use zookeeper_client::MultiWriter;

use crate::store::Held;

/// Adds to `writer` (an application's own `multi`) a check that passes only
/// while `guard` holds its mutex: the guard's lock node still exists,
/// unchanged. Each acquisition has a node of its own (a unique, sequential
/// name), which the lock's loss (session expiry, a break, the release)
/// deletes. The `multi`'s other operations then apply in one atomic step
/// with the check, or none does (`commit` fails, the check's result
/// `Error::NoNode`).
///
/// Mutexes of a ZooKeeper store, on a client with the store's chroot (no
/// chroot for a store opened from a URL). `Unsupported` for a semaphore
/// permit, a side of a read-write lock, or a guard of another store.
///
/// ```no_run
/// # async fn demo(client: omnilock_zookeeper::zookeeper_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use omnilock_core::Locks;
/// # let locks: Locks = todo!();
/// let guard = locks.acquire("config/publisher").await?;
/// let mut writer = client.new_multi_writer();
/// omnilock_zookeeper::check_owner(&mut writer, &guard)?;
/// writer.add_set_data("/app/config", b"v42", None)?;
/// // Err(..) once the lock was lost, and nothing was written.
/// let applied = writer.commit().await.is_ok();
/// # let _ = applied; Ok(()) }
/// ```
pub fn check_owner(writer: &mut MultiWriter<'_>, guard: &LockGuard) -> Result<()> {
    OwnerCheck::new(guard)?.add_to(writer)
}

/// What [`check_owner`] checks, kept apart from the guard: build it while
/// the guard holds, add it to a `multi` later (the check then fails if the
/// hold has ended meanwhile).
#[derive(Debug, Clone)]
pub struct OwnerCheck {
    path: String,
}

impl OwnerCheck {
    /// The check of `guard`'s hold. `Unsupported` for a semaphore permit, a
    /// side of a read-write lock, or a guard of another store.
    pub fn new(guard: &LockGuard) -> Result<Self> {
        let held = mutex_grant::<Held>(guard, "an owner check", "a ZooKeeper store")?;
        Ok(OwnerCheck {
            path: held.hold.path().to_string(),
        })
    }

    /// Adds the check to `writer`.
    pub fn add_to(&self, writer: &mut MultiWriter<'_>) -> Result<()> {
        // omnilock never changes a lock node's data: version 0 is the node
        // as created, and no later node can have this node's name.
        writer
            .add_check_version(&self.path, 0)
            .map_err(|e| Error::config(format!("cannot check the lock's node: {e}")))
    }
}
