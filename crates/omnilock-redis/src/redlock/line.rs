//! A waiter's place in the line of every node: waiting for its turn, and
//! leaving the line when the acquire ends.

use super::*;
impl RedlockStore {
    /// Takes `entry` out of the line on the nodes `on` selects, waking the
    /// next waiter where the lock is free. One try each: a place left
    /// behind runs out with its lease.
    pub(super) async fn leave_line(
        &self,
        name: &LockName,
        entry: &str,
        on: impl Fn(usize) -> bool,
    ) {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, name);
        let calls = inner
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| on(*i))
            .map(|(_, node)| {
                let mut conn = node.conn.clone();
                let keys = &keys;
                let timeout = inner.options.response_timeout;
                async move {
                    let cancel =
                        inner
                            .scripts
                            .redlock_cancel(&mut conn, keys, entry, &inner.channel_prefix);
                    let _ = tokio::time::timeout(timeout, cancel).await;
                }
            });
        join_all(calls).await;
    }

    /// Waits for this waiter's turn: until a majority of nodes has woken it
    /// (or some have, and the rest do not follow within
    /// [`MAJORITY_GRACE`]), or `delay` has passed.
    pub(super) async fn wait_turn(&self, waiter: &Waiter, delay: Duration) {
        let deadline = tokio::time::Instant::now() + delay;
        let mut first_woken: Option<tokio::time::Instant> = None;
        loop {
            let woken = waiter.notify.notified();
            let by = waiter.woken_by.load(Ordering::Relaxed);
            if by.count_ones() as usize >= self.quorum() {
                return;
            }
            let until = match (by, first_woken) {
                (0, _) => deadline,
                (_, Some(first)) => deadline.min(first + MAJORITY_GRACE),
                (_, None) => {
                    let first = *first_woken.insert(tokio::time::Instant::now());
                    deadline.min(first + MAJORITY_GRACE)
                }
            };
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }
}

/// A waiter's place in the line of every node, left (in the background)
/// when the acquire ends: everywhere if it ends without the lock, on the
/// nodes that did not grant it if it won.
pub(super) struct Place {
    pub(super) store: RedlockStore,
    pub(super) name: LockName,
    pub(super) entry: String,
    /// Whether it ever queued (had a ticket): a try-acquire never does.
    pub(super) queued: bool,
    /// Per node, whether it answered with a grant (once the acquire won).
    pub(super) granted_on: Option<Vec<bool>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        lock_unpoisoned(&self.store.inner.waiters).remove(&self.entry);
        if !self.queued {
            return;
        }
        let granted_on = self.granted_on.take();
        if granted_on
            .as_ref()
            .is_some_and(|answered| answered.iter().all(|granted| *granted))
        {
            return;
        }
        let (store, name, entry) = (self.store.clone(), self.name.clone(), self.entry.clone());
        omnilock_core::spawn_cleanup(async move {
            let left_on = |i: usize| {
                granted_on
                    .as_ref()
                    .is_none_or(|answered| !answered.get(i).copied().unwrap_or(false))
            };
            store.leave_line(&name, &entry, left_on).await;
        });
    }
}
