//! `lock_all` over every pair of overlapping sets (see
//! `omnilock_models::lock_all`).

use omnilock_models::check::{explore, search};
use omnilock_models::lock_all::{LockAllModel, LockAllRule};

#[test]
fn no_deadlock_for_any_two_overlapping_sets() {
    for atomic in [false, true] {
        let model = LockAllModel {
            clients: 2,
            atomic,
            rule: LockAllRule::Sorted,
        };
        let name = format!("lock_all, 2 clients, atomic step {atomic}");
        explore(&name, model).assert_holds(500);
    }
}

#[test]
fn no_deadlock_for_any_three_two_name_sets() {
    for atomic in [false, true] {
        let model = LockAllModel {
            clients: 3,
            atomic,
            rule: LockAllRule::Sorted,
        };
        let name = format!("lock_all, 3 clients, atomic step {atomic}");
        explore(&name, model).assert_holds(2_000);
    }
}

/// Broken: parts taken in the caller's order deadlock two clients whose
/// sets share two names that they give in opposite orders.
#[test]
fn parts_in_the_callers_order_deadlock() {
    let model = LockAllModel {
        clients: 2,
        atomic: false,
        rule: LockAllRule::CallerOrder,
    };
    let found = search("lock_all, caller's order", model, "no deadlock", 10);
    found.counterexample("no deadlock");
}
