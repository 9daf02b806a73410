//! Reentrancy: the same owner re-enters, in this client and (where the store
//! keeps the count) through another; a non-reentrant re-acquire fails.

use omnilock_core::{ErrorKind, Locks, Owner};

use super::{clients, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: reentrancy within a process and across clients.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(reentrancy),
    scenario!(reentrancy_across_clients, Claim::CrossProcessReentrancy),
    scenario!(non_reentrant_reacquire_fails),
];

/// An owner re-enters a lock it holds, to depth 3, with the same token; the
/// lock frees only after as many releases; other owners are kept out meanwhile.
pub(crate) async fn reentrancy(subject: &Subject) {
    let name = unique("reentrant");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let me = Owner::random();
    let first = a.lock(&name).owner(&me).acquire().await.expect("depth 1");
    let second = within("re-enter", a.lock(&name).owner(&me).acquire())
        .await
        .expect("depth 2");
    let third = within("re-enter", a.lock(&name).owner(&me).try_acquire())
        .await
        .expect("depth 3")
        .expect("try_acquire re-enters");
    assert_eq!(first.token(), second.token());
    assert_eq!(first.token(), third.token());
    assert_eq!(first.hold_count(), 3);
    for guard in [third, first] {
        guard.release().await.expect("release");
        assert!(b.try_acquire(&name).await.expect("probe").is_none());
    }
    assert!(second.is_held());
    second.release().await.expect("last release");
    let other = within("another owner after the last release", b.acquire(&name))
        .await
        .expect("another owner acquires");
    assert_ne!(other.token(), 0);
}

/// Where the store keeps the hold count (`cross_process_reentrancy`), the
/// same owner re-enters through another client (another connection, as in
/// another process) with the same token; the lock frees only after both
/// release; a non-reentrant re-acquire there is `WouldDeadlock`.
pub(crate) async fn reentrancy_across_clients(subject: &Subject) {
    let [a, b, other] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let name = unique("reentrant-across");
    let me = Owner::random();
    let first = a
        .lock(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("first hold");
    let second = within(
        "re-entry through another client",
        b.lock(&name).owner(&me).acquire(),
    )
    .await
    .expect("second hold");
    assert_eq!(first.token(), second.token());
    let err = b
        .lock(&name)
        .owner(&me)
        .reentrant(false)
        .try_acquire()
        .await
        .expect_err("non-reentrant re-acquire");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    first.release().await.expect("release one hold");
    assert!(
        other.try_acquire(&name).await.expect("probe").is_none(),
        "freed while the other client still holds"
    );
    second.release().await.expect("release the last hold");
    let taken = within(
        "another owner after both releases",
        other.try_acquire(&name),
    )
    .await
    .expect("probe");
    assert!(taken.is_some(), "still held after both releases");
}

/// A non-reentrant re-acquire by the holder is an error at once, not a deadlock.
pub(crate) async fn non_reentrant_reacquire_fails(subject: &Subject) {
    let name = unique("nonreentrant");
    let locks = subject.client().await;
    let me = Owner::random();
    let held = locks
        .lock(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("acquire");
    for wait in [true, false] {
        let request = locks.lock(&name).owner(&me).reentrant(false);
        let err = within("a non-reentrant re-acquire fails", async {
            if wait {
                request.acquire().await.map(|_| ())
            } else {
                request.try_acquire().await.map(|_| ())
            }
        })
        .await
        .expect_err("non-reentrant re-acquire must fail");
        assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    }
    assert_eq!(held.hold_count(), 1);
    held.release().await.expect("release");
}
