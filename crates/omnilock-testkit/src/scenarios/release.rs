//! Release on drop: in the background, promptly, also off any runtime.

use std::time::Duration;

use omnilock_core::{LockGuard, Locks};

use super::{clients, queue_waiter, unique, within};
use crate::Subject;
use crate::registry::{Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: release on drop.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(drop_releases_in_background),
    scenario!(drop_outside_runtime),
];

/// Dropping a guard releases the lock in the background, promptly.
pub(crate) async fn drop_releases_in_background(subject: &Subject) {
    dropped_guard_frees_lock(subject, "drop releases", drop).await;
}

/// A guard dropped on a thread with no runtime does not panic and still
/// releases the lock.
pub(crate) async fn drop_outside_runtime(subject: &Subject) {
    dropped_guard_frees_lock(subject, "off-runtime drop releases", |guard| {
        std::thread::spawn(move || drop(guard))
            .join()
            .expect("dropping a guard off-runtime must not panic");
    })
    .await;
}

/// A holder with a 60 s lease lets go of its guard with `let_go` while
/// another client waits: the waiter gets the lock soon (`what`), long
/// before the lease would have run out.
async fn dropped_guard_frees_lock(subject: &Subject, what: &str, let_go: impl FnOnce(LockGuard)) {
    let name = unique("drop");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let ttl = Duration::from_secs(60);
    let guard = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let waiter = queue_waiter(&b, &name, ttl).await;
    let_go(guard);
    let next = within(what, waiter)
        .await
        .expect("task")
        .expect("waiter acquires");
    next.release().await.expect("release");
}
