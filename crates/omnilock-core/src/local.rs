//! Waiters of this process, per lock: a backend that polls its store still
//! wakes a waiter of its own process at once when it releases a lock here
//! (or learns of a release, e.g. by PostgreSQL NOTIFY).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::name::LockName;
use crate::sync::lock_unpoisoned;

/// A registry of per-lock wake-up signals, shared by the waiters of one
/// backend instance. An entry outlives its last waiter only until the
/// registry next sweeps: it keeps at most about twice the names waited on
/// at the last sweep, and at least 64, so a process that
/// touches many names over time does not keep one entry per name it ever
/// waited on.
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
    signals: Mutex<Signals>,
}

#[derive(Debug, Default)]
struct Signals {
    by_name: HashMap<LockName, Weak<Notify>>,
    /// The size at which entries without waiters are swept out next.
    sweep_at: usize,
}

/// The fewest entries a registry holds before it sweeps.
const SWEEP_FROM: usize = 64;

impl LocalWaiters {
    /// The signal for `name`; keep it while waiting.
    pub fn register(&self, name: &LockName) -> Arc<Notify> {
        let mut signals = lock_unpoisoned(&self.signals);
        if let Some(signal) = signals.by_name.get(name).and_then(Weak::upgrade) {
            return signal;
        }
        if signals.by_name.len() >= signals.sweep_at.max(SWEEP_FROM) {
            // Amortized: the next sweep waits until the map has doubled.
            signals
                .by_name
                .retain(|_, signal| signal.strong_count() > 0);
            signals.sweep_at = 2 * signals.by_name.len();
        }
        let signal = Arc::new(Notify::new());
        signals
            .by_name
            .insert(name.clone(), Arc::downgrade(&signal));
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
        signals.by_name.get(name).and_then(Weak::upgrade)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiting on many names one after another keeps few entries; names
    /// waited on now are never swept.
    #[test]
    fn entries_without_waiters_are_swept() {
        let waiters = LocalWaiters::default();
        let name = |i: usize| LockName::new(&format!("n{i}")).unwrap();
        let live: Vec<Arc<Notify>> = (0..10).map(|i| waiters.register(&name(i))).collect();
        for i in 10..5_000 {
            drop(waiters.register(&name(i)));
        }
        let kept = lock_unpoisoned(&waiters.signals).by_name.len();
        assert!(kept <= 2 * SWEEP_FROM, "{kept} entries kept");
        for (i, signal) in live.iter().enumerate() {
            assert!(
                Arc::ptr_eq(signal, &waiters.register(&name(i))),
                "a live entry was swept"
            );
        }
    }
}
