//! The ordered-key queue of etcd and ZooKeeper (see
//! `omnilock_models::recipe`).

use omnilock_models::check::{explore, search};
use omnilock_models::faults::Faults;
use omnilock_models::recipe::{RecipeModel, RecipeRule};

/// 3 clients, 1 lease expiry, 1 crash, 1 cancel, 1 retried request (an
/// enqueue whose answer was lost, or a delete sent twice).
fn model(rounds: u8, rule: RecipeRule) -> RecipeModel {
    RecipeModel {
        clients: 3,
        rounds,
        faults: Faults {
            expiries: 1,
            crashes: 1,
            cancels: 1,
            duplicates: 1,
        },
        rule,
    }
}

#[test]
fn one_holder_and_nobody_passed_through_expiries_crashes_cancels_and_retries() {
    explore("ordered keys", model(1, RecipeRule::Store)).assert_holds(200_000);
}

/// Broken: a waiter woken by its predecessor's deletion that does not read
/// the queue again holds beside the holder ahead of that predecessor.
#[test]
fn a_waiter_that_trusts_its_predecessor_gone_holds_beside_the_holder() {
    let found = search(
        "ordered keys, predecessor gone means held",
        model(1, RecipeRule::PredecessorGoneMeansHeld),
        "at most one holder",
        12,
    );
    found.counterexample("at most one holder");
}

/// Broken: deleting by name alone lets the late copy of a retried release
/// delete the same owner's next key, under a hold.
#[test]
fn a_delete_by_name_only_gives_two_holders() {
    let found = search(
        "ordered keys, delete by name",
        model(2, RecipeRule::DeleteByName),
        "at most one holder",
        14,
    );
    found.counterexample("at most one holder");
}
