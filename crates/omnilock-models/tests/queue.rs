//! The fair mutex queue with leases (see `omnilock_models::queue`).

use omnilock_models::check::{explore, search};
use omnilock_models::faults::Faults;
use omnilock_models::queue::{QueueModel, QueueRule};

/// 3 clients, 2 acquisitions each, 2 lease expiries, 1 crash, 1 cancel, 1
/// retried release.
fn model(rule: QueueRule) -> QueueModel {
    QueueModel {
        clients: 3,
        rounds: 2,
        faults: Faults {
            expiries: 2,
            crashes: 1,
            cancels: 1,
            duplicates: 1,
        },
        rule,
    }
}

#[test]
fn one_holder_and_nobody_passed_through_expiries_crashes_cancels_and_retries() {
    explore("fifo queue", model(QueueRule::Store)).assert_holds(500_000);
}

/// Broken: the late copy of a retried release, checked by owner only,
/// frees its owner's next hold, and a third client takes the lock.
#[test]
fn a_release_checked_by_owner_only_gives_two_holders() {
    let found = search(
        "fifo queue, release by owner only",
        model(QueueRule::ReleaseByOwnerOnly),
        "at most one holder",
        12,
    );
    found.counterexample("at most one holder");
}

/// Broken: a store that frees the lock on release and lets anyone take
/// it lets a newcomer pass a waiter.
#[test]
fn an_unfair_queue_lets_a_newcomer_pass_a_waiter() {
    let found = search(
        "fifo queue, unfair",
        model(QueueRule::Unfair),
        "no waiter passed by a later one",
        12,
    );
    found.counterexample("no waiter passed by a later one");
}
