//! Locking the short-lived `std` mutexes omnilock keeps its own state in.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, even if a thread panicked while holding it.
///
/// omnilock's critical sections only swap or update small values and never
/// call out while holding the lock, so a panic elsewhere cannot leave the
/// data half-updated: poisoning carries no information, and refusing to go
/// on would turn one panic into every later lock operation failing.
pub fn lock_unpoisoned<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
