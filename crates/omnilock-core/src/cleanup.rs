//! Clean-up that outlives its caller: the undo of an acquire dropped while
//! its request was on the wire, the delete of a dropped waiter's place in
//! line, the release of a dropped guard. Each runs in a task of its own on the current runtime, and this
//! module counts the ones under way, so that [`Locks::close`] can wait for
//! them: a process that closes its stores and exits would otherwise leave
//! their entries in the store until a lease runs out (a waiter's place
//! would stand ahead of every later waiter until then).
//!
//! The count is the process's, not a store's: closing one store also waits
//! for another's clean-up, for at most [`SETTLE_WITHIN`].
//!
//! [`Locks::close`]: crate::Locks::close

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How long [`settle`] waits at most: a reachable store answers a delete in
/// milliseconds; one that does not answer within this frees the entries
/// when their leases run out.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(3);

static UNDER_WAY: AtomicUsize = AtomicUsize::new(0);
static SETTLED: Notify = Notify::const_new();

/// Counts one clean-up until it is dropped: finished, aborted, panicked or
/// dropped with its runtime.
struct Counted;

impl Counted {
    fn start() -> Counted {
        UNDER_WAY.fetch_add(1, Ordering::SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if UNDER_WAY.fetch_sub(1, Ordering::SeqCst) == 1 {
            SETTLED.notify_waiters();
        }
    }
}

/// Runs `cleanup` in a background task on the current runtime, counted
/// until it ends (see [`settle`]). Outside any runtime nothing runs: the
/// lease then removes whatever was left.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let task = omnilock_core::spawn_cleanup(async { /* delete an entry */ });
/// task.expect("inside a runtime").await.unwrap();
/// # }
/// ```
pub fn spawn_cleanup<F>(cleanup: F) -> Option<tokio::task::JoinHandle<()>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(spawn_cleanup_on(&runtime, cleanup))
}

/// [`spawn_cleanup`] on `runtime` (a guard dropped on a thread outside the
/// runtime that acquired it releases on that runtime).
pub(crate) fn spawn_cleanup_on<F>(
    runtime: &tokio::runtime::Handle,
    cleanup: F,
) -> tokio::task::JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let counted = Counted::start();
    runtime.spawn(async move {
        let _counted = counted;
        cleanup.await;
    })
}

/// Waits until no clean-up of this process is under way, or `within` has
/// passed. Returns whether they all ended.
pub async fn settle(within: Duration) -> bool {
    let ended = async {
        loop {
            let notified = SETTLED.notified();
            if UNDER_WAY.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(within, ended).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[tokio::test]
    async fn settle_waits_for_the_cleanups_under_way() {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        spawn_cleanup(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            flag.store(true, Ordering::SeqCst);
        })
        .expect("runtime");
        assert!(settle(Duration::from_secs(10)).await);
        assert!(
            done.load(Ordering::SeqCst),
            "settled before the clean-up ended"
        );
    }

    #[tokio::test]
    async fn settle_gives_up_after_its_bound() {
        let task = spawn_cleanup(std::future::pending()).expect("runtime");
        assert!(!settle(Duration::from_millis(100)).await);
        task.abort();
        let _ = task.await;
        assert!(
            settle(Duration::from_secs(10)).await,
            "an aborted clean-up still counted"
        );
    }
}
