//! [`Capabilities`]: what a store can promise, flag by flag, so that
//! users can check before relying on a property and the conformance suite
//! runs each scenario only where it is claimed.

#[cfg(doc)]
use crate::backend::Backend;

/// What a backend can promise. Conformance scenarios run only where claimed,
/// and users can check before relying on a property.
///
/// More flags may come, so a backend builds its claims from
/// [`Capabilities::none`] with the `with_*` setters:
///
/// ```
/// use omnilock_core::Capabilities;
/// let caps = Capabilities::none().with_fair(true).with_fencing(true);
/// assert!(caps.fair && caps.fencing && !caps.holder);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Waiters are granted the lock in the order they asked (FIFO).
    pub fair: bool,
    /// Waiters are woken by the store when the lock frees, not by polling.
    pub push_wakeups: bool,
    /// Fencing tokens strictly increase per lock name, across owners,
    /// processes and restarts of the client.
    pub fencing: bool,
    /// The same owner re-enters in another process too (the store keeps the
    /// hold count). Reentrancy within one process works on every backend.
    pub cross_process_reentrancy: bool,
    /// Leases are extended while a guard lives, so a lock can be held longer
    /// than its TTL.
    pub lease_renewal: bool,
    /// Separate OS processes (and machines) see the same locks.
    pub cross_process: bool,
    /// [`Backend::break_lock`] is implemented.
    pub break_lock: bool,
    /// [`Backend::holder`] says who holds a lock (owner and token);
    /// without it, `Locks::holder` answers `Unsupported`.
    pub holder: bool,
    /// Leader elections work (`Locks::election`: campaign, `leader()`,
    /// observe); they need a store that can say who holds a lock. The next
    /// leader is the longest-waiting candidate only where the store is
    /// `fair`. Without it, `leader()` answers `Unsupported`.
    pub election: bool,
    /// A granted lock survives the loss of one store server (a crash, a
    /// restart, a failover to a replica): the grant is on a quorum, or
    /// durable on the one server, before it is returned. Without it, losing
    /// a server can free a held lock and let a second client take it; only
    /// fencing tokens then protect the resource (Redis: replication is
    /// asynchronous; Redlock: a node restarted without persistence).
    pub survives_failover: bool,
    /// Counting semaphores work (`Locks::semaphore`): at most N permits of
    /// one name are held at any instant. Without it, an attempt answers
    /// `Unsupported`.
    pub semaphore: bool,
    /// Read-write locks work (`Locks::rw_lock`): many readers or one
    /// writer. Where the store is also `fair`, a waiting writer blocks later
    /// readers, so writers are never starved. Without it, an attempt answers
    /// `Unsupported`.
    pub rw_lock: bool,
    /// [`Locks::lock_all`](crate::Locks::lock_all) takes free locks in one
    /// atomic step ([`Backend::try_acquire_all`]: one transaction, one
    /// script), one round trip for the whole set; busy sets are then waited
    /// for part by part in the global order, as on every store.
    pub atomic_lock_all: bool,
    /// [`Locks::check`](crate::Locks::check) and
    /// [`LockGuard::check`](crate::LockGuard::check) answer exactly whether
    /// a mutex's fencing token is still the holder's (Chubby's
    /// `CheckSequencer`): `false` after a release, a loss, an expiry, a
    /// break or a later holder, never `true` for a stale token. Without it,
    /// they answer `Unsupported`.
    pub check: bool,
    /// A write in the store itself can be made conditional on holding a
    /// mutex, in one atomic step with the check: SQL table mode's
    /// `sql::TxGuard` (the application's own transaction), etcd's
    /// `etcd::is_owner` (a compare for its own `Txn`), ZooKeeper's
    /// `zookeeper::check_owner` (a check in its own `multi`), Redis's
    /// `redis::GuardedWrite` (a script on the lock's master). See
    /// docs/fencing.md.
    pub guarded_write: bool,
    /// [`Locks::inspect`](crate::Locks::inspect) reports the holders of
    /// every kind of lock the store offers (owner, token, side, and the
    /// time held and lease left where the store keeps them); without it,
    /// `inspect` answers `Unsupported`.
    pub inspect: bool,
    /// [`Locks::inspect`](crate::Locks::inspect) also reports each waiter
    /// of every kind (owner where recorded, and side; in the order of grant
    /// where the store is `fair`). Without it, an inspection's `waiters` is
    /// `None` where the store keeps no record of who waits (a mutex whose
    /// waiters poll); a kind whose waiters the store does record (a
    /// semaphore's queued entries) may still list them.
    pub inspect_waiters: bool,
    /// [`Locks::list`](crate::Locks::list) finds the held locks under a
    /// name prefix; without it, `list` answers `Unsupported`.
    pub list: bool,
    /// [`Locks::write_record`](crate::Locks::write_record) and
    /// [`Locks::read_record`](crate::Locks::read_record) keep a record in
    /// the store for a given time after the writer has gone (what
    /// `omnilock run --once-per` needs). Stores whose every key lives and
    /// dies with a client's session (an advisory session) cannot. The
    /// memory store keeps them for its process's life.
    pub records: bool,
}

/// `with_<flag>(on)` for each flag: the claims with that one set.
macro_rules! capability_setters {
    ($($flag:ident => $setter:ident),* $(,)?) => {
        $(
            #[doc = concat!("These claims with [`", stringify!($flag), "`](Self::", stringify!($flag), ") set to `on`.")]
            pub const fn $setter(mut self, on: bool) -> Self {
                self.$flag = on;
                self
            }
        )*
    };
}

impl Capabilities {
    /// No claims at all: every flag false.
    pub const fn none() -> Self {
        Capabilities {
            fair: false,
            push_wakeups: false,
            fencing: false,
            cross_process_reentrancy: false,
            lease_renewal: false,
            cross_process: false,
            break_lock: false,
            holder: false,
            election: false,
            survives_failover: false,
            semaphore: false,
            rw_lock: false,
            atomic_lock_all: false,
            check: false,
            guarded_write: false,
            inspect: false,
            inspect_waiters: false,
            list: false,
            records: false,
        }
    }

    capability_setters! {
        fair => with_fair,
        push_wakeups => with_push_wakeups,
        fencing => with_fencing,
        cross_process_reentrancy => with_cross_process_reentrancy,
        lease_renewal => with_lease_renewal,
        cross_process => with_cross_process,
        break_lock => with_break_lock,
        holder => with_holder,
        election => with_election,
        survives_failover => with_survives_failover,
        semaphore => with_semaphore,
        rw_lock => with_rw_lock,
        atomic_lock_all => with_atomic_lock_all,
        check => with_check,
        guarded_write => with_guarded_write,
        inspect => with_inspect,
        inspect_waiters => with_inspect_waiters,
        list => with_list,
        records => with_records,
    }

    /// Every flag by its field name, in the order the struct declares
    /// them: for a report (a health page, a table in the docs) that must
    /// not miss a flag added later.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// let locks = omnilock_core::Locks::new(omnilock_core::MemStore::new());
    /// for (flag, on) in locks.capabilities().flags() {
    ///     println!("{flag}: {}", if on { "yes" } else { "no" });
    /// }
    /// assert!(locks.capabilities().flags().contains(&("fencing", true)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn flags(&self) -> [(&'static str, bool); 19] {
        // Destructured without `..`: a new field breaks this until it is
        // listed.
        let Capabilities {
            fair,
            push_wakeups,
            fencing,
            cross_process_reentrancy,
            lease_renewal,
            cross_process,
            break_lock,
            holder,
            election,
            survives_failover,
            semaphore,
            rw_lock,
            atomic_lock_all,
            check,
            guarded_write,
            inspect,
            inspect_waiters,
            list,
            records,
        } = *self;
        [
            ("fair", fair),
            ("push_wakeups", push_wakeups),
            ("fencing", fencing),
            ("cross_process_reentrancy", cross_process_reentrancy),
            ("lease_renewal", lease_renewal),
            ("cross_process", cross_process),
            ("break_lock", break_lock),
            ("holder", holder),
            ("election", election),
            ("survives_failover", survives_failover),
            ("semaphore", semaphore),
            ("rw_lock", rw_lock),
            ("atomic_lock_all", atomic_lock_all),
            ("check", check),
            ("guarded_write", guarded_write),
            ("inspect", inspect),
            ("inspect_waiters", inspect_waiters),
            ("list", list),
            ("records", records),
        ]
    }
}
