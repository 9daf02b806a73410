//! What every clone of a [`Locks`](crate::Locks) handle shares: the
//! backend, and the holds of named owners in this process (reentrancy
//! without a round trip).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::backend::Primitive;
use crate::dyn_backend::DynBackend;
use crate::hold::Hold;
use crate::name::{LockName, Owner};
use crate::renewal::Renewals;
use crate::sync::lock_unpoisoned;

pub(crate) type HoldSlot = Arc<tokio::sync::Mutex<Weak<Hold>>>;

/// A reentrancy slot's key: the name, the owner and which lock of that name
/// (the mutex, or one side of the read-write lock; semaphore permits are
/// never re-entered and have no slot).
pub(crate) type SlotKey = (LockName, Owner, Primitive);

/// What every clone of a [`Locks`] handle shares: the backend and the holds
/// of named owners in this process (for reentrancy without a round trip).
pub(crate) struct Shared {
    pub(crate) backend: Arc<dyn DynBackend>,
    holds: Mutex<HashMap<SlotKey, HoldSlot>>,
    /// The holds of read-write locks by named owners, readable without
    /// waiting for a slot: whether an owner holds the other side.
    rw_holds: Mutex<HashMap<SlotKey, Weak<Hold>>>,
    /// The renewal schedule of every hold.
    pub(crate) renewals: Arc<Renewals>,
    /// Owners of acquisitions that named none, free to lend again: each
    /// came back after a successful release, so no store holds anything of
    /// theirs. A store that keys its entries by owner (etcd) then writes
    /// the same few keys again and again, instead of a new key, and a new
    /// tombstone, per acquisition.
    spare_owners: Mutex<Vec<Owner>>,
    /// Set by [`Locks::close`](crate::Locks::close): a waiting acquire that
    /// the close ended does not queue again.
    pub(crate) closed: std::sync::atomic::AtomicBool,
}

/// The most spare owners a handle keeps: about the number of acquisitions
/// without an owner it has in flight at once.
const SPARE_OWNERS: usize = 64;

impl Shared {
    pub(crate) fn new(backend: Arc<dyn DynBackend>) -> Self {
        Shared {
            backend,
            holds: Mutex::new(HashMap::new()),
            rw_holds: Mutex::new(HashMap::new()),
            renewals: Arc::default(),
            spare_owners: Mutex::new(Vec::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// An owner for an acquisition that named none: a spare one, or a new
    /// random one.
    pub(crate) fn lend_owner(&self) -> Owner {
        lock_unpoisoned(&self.spare_owners)
            .pop()
            .unwrap_or_else(Owner::random)
    }

    /// `owner`, lent by [`Shared::lend_owner`], has nothing left in the
    /// store: its hold was released successfully.
    pub(crate) fn give_back_owner(&self, owner: Owner) {
        let mut spare = lock_unpoisoned(&self.spare_owners);
        if spare.len() < SPARE_OWNERS {
            spare.push(owner);
        }
    }

    pub(crate) fn slot(&self, name: &LockName, owner: &Owner, primitive: Primitive) -> HoldSlot {
        let mut holds = lock_unpoisoned(&self.holds);
        holds
            .entry((name.clone(), owner.clone(), primitive))
            .or_default()
            .clone()
    }

    /// Drops the reentrancy slot `key` if nobody uses it and it holds no
    /// live hold: an attempt that ended without a grant (busy, timed out,
    /// failed, cancelled) leaves nothing behind. Without this, every
    /// `lock_all` part that failed (each has an owner of its own) kept its
    /// slot for the handle's lifetime.
    pub(crate) fn prune_slot(&self, key: &SlotKey) {
        let mut holds = lock_unpoisoned(&self.holds);
        let unused = holds.get(key).is_some_and(|slot| {
            Arc::strong_count(slot) == 1
                && slot.try_lock().is_ok_and(|hold| hold.strong_count() == 0)
        });
        if unused {
            holds.remove(key);
        }
    }

    /// How many reentrancy slots the handle keeps.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        lock_unpoisoned(&self.holds).len()
    }

    /// The live hold of `owner` on `name`'s read or write side in this
    /// process, if there is one.
    pub(crate) fn held(
        &self,
        name: &LockName,
        owner: &Owner,
        primitive: Primitive,
    ) -> Option<Arc<Hold>> {
        let rw_holds = lock_unpoisoned(&self.rw_holds);
        let hold = rw_holds.get(&(name.clone(), owner.clone(), primitive))?;
        hold.upgrade().filter(|hold| hold.is_held())
    }

    /// Records a new hold of a read-write lock (see [`Shared::held`]).
    pub(crate) fn remember_rw(&self, hold: &Arc<Hold>) {
        let spec = &hold.spec;
        if matches!(spec.primitive, Primitive::Read | Primitive::Write) {
            let key = (spec.name.clone(), spec.owner.clone(), spec.primitive);
            lock_unpoisoned(&self.rw_holds).insert(key, Arc::downgrade(hold));
        }
    }

    /// Drops the reentrancy slot of a released hold unless someone is using it.
    pub(crate) fn forget(&self, hold: &Hold) {
        let mut holds = lock_unpoisoned(&self.holds);
        let key = (
            hold.spec.name.clone(),
            hold.spec.owner.clone(),
            hold.spec.primitive,
        );
        if let Some(slot) = holds.get(&key)
            && Arc::strong_count(slot) == 1
        {
            holds.remove(&key);
        }
        drop(holds);
        let mut rw_holds = lock_unpoisoned(&self.rw_holds);
        if rw_holds
            .get(&key)
            .is_some_and(|h| std::ptr::eq(h.as_ptr(), hold))
        {
            rw_holds.remove(&key);
        }
    }
}
