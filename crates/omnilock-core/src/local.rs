//! Waiters of this process, per lock: a backend that polls its store still
//! wakes a waiter of its own process at once when it releases a lock here
//! (or learns of a release, e.g. by PostgreSQL NOTIFY).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::name::LockName;
use crate::sync::lock_unpoisoned;

/// A registry of per-lock wake-up signals, shared by the waiters of one
/// backend instance. Entries go away with their last waiter.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use omnilock_core::{LocalWaiters, LockName};
/// let waiters = LocalWaiters::default();
/// let name = LockName::new("jobs").unwrap();
/// let signal = waiters.register(&name);
/// let woken = signal.notified();
/// waiters.wake_one(&name);
/// woken.await;
/// # }
/// ```
#[derive(Debug, Default)]
pub struct LocalWaiters {
    signals: Mutex<HashMap<LockName, Weak<Notify>>>,
}

impl LocalWaiters {
    /// The signal for `name`; keep it while waiting.
    pub fn register(&self, name: &LockName) -> Arc<Notify> {
        let mut signals = lock_unpoisoned(&self.signals);
        if let Some(signal) = signals.get(name).and_then(Weak::upgrade) {
            return signal;
        }
        if signals.len() >= 1024 {
            signals.retain(|_, signal| signal.strong_count() > 0);
        }
        let signal = Arc::new(Notify::new());
        signals.insert(name.clone(), Arc::downgrade(&signal));
        signal
    }

    /// Wakes one waiter of `name` (or the next to wait), in FIFO order.
    pub fn wake_one(&self, name: &LockName) {
        if let Some(signal) = self.get(name) {
            signal.notify_one();
        }
    }

    /// Wakes every waiter of `name` that is waiting now (for fair stores,
    /// where only the head of the line may take the lock).
    pub fn wake_all(&self, name: &LockName) {
        if let Some(signal) = self.get(name) {
            signal.notify_waiters();
        }
    }

    fn get(&self, name: &LockName) -> Option<Arc<Notify>> {
        let signals = lock_unpoisoned(&self.signals);
        signals.get(name).and_then(Weak::upgrade)
    }
}
