//! Release on drop: in the background, promptly, also off any runtime.

use std::time::Duration;

use omnilock_core::Locks;

use super::{clients, queue_waiter, unique, within};
use crate::registry::{scenario, Scenario};
use crate::Subject;

/// The scenarios of this module, with what each needs the store to claim: release on drop.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(drop_releases_in_background),
    scenario!(drop_outside_runtime),
];

/// Dropping a guard releases the lock in the background, promptly.
pub(crate) async fn drop_releases_in_background(subject: &Subject) {
    let name = unique("drop");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let waiter = queue_waiter(&b, &name, Duration::from_secs(60)).await;
    drop(guard);
    let next = within("drop releases", waiter)
        .await
        .expect("task")
        .expect("waiter acquires");
    next.release().await.expect("release");
}

/// A guard dropped on a thread with no runtime does not panic and still
/// releases the lock.
pub(crate) async fn drop_outside_runtime(subject: &Subject) {
    let name = unique("noruntime");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let waiter = queue_waiter(&b, &name, Duration::from_secs(60)).await;
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("dropping a guard off-runtime must not panic");
    let next = within("off-runtime drop releases", waiter)
        .await
        .expect("task")
        .expect("waiter acquires");
    next.release().await.expect("release");
}
