//! Semaphores and read-write locks (see `omnilock_models::counted`).

use omnilock_models::check::{explore, search};
use omnilock_models::counted::{CountedModel, CountedRule, Side};
use omnilock_models::faults::Faults;

const FAULTS: Faults = Faults {
    expiries: 2,
    crashes: 1,
    cancels: 1,
    duplicates: 1,
};

/// Three callers of a 2-permit semaphore and one that asks for 1 permit.
fn semaphore(rule: CountedRule) -> CountedModel {
    CountedModel {
        sides: vec![
            Side::Permit(2),
            Side::Permit(2),
            Side::Permit(2),
            Side::Permit(1),
        ],
        rounds: 1,
        faults: FAULTS,
        rule,
    }
}

/// Two readers and two writers, arriving in every order.
fn rw_lock(rule: CountedRule) -> CountedModel {
    CountedModel {
        sides: vec![Side::Read, Side::Write, Side::Read, Side::Write],
        rounds: 1,
        faults: FAULTS,
        rule,
    }
}

#[test]
fn a_semaphore_never_admits_more_than_its_count() {
    explore("semaphore", semaphore(CountedRule::Store)).assert_holds(100_000);
}

#[test]
fn a_rw_lock_never_admits_a_reader_beside_a_writer_nor_starves_a_writer() {
    explore("rw lock", rw_lock(CountedRule::Store)).assert_holds(100_000);
}

/// Broken: a writer that weighs 1 holds beside a reader.
#[test]
fn a_rw_lock_ignoring_weights_admits_a_reader_beside_a_writer() {
    let found = search(
        "rw lock, weights ignored",
        rw_lock(CountedRule::IgnoreWeights),
        "never a reader beside a writer",
        10,
    );
    found.counterexample("never a reader beside a writer");
}

/// Broken: a walk that skips the writer that does not fit admits a later
/// reader first, and the writer starves.
#[test]
fn a_walk_past_a_waiting_writer_starves_it() {
    let found = search(
        "rw lock, walk past what does not fit",
        rw_lock(CountedRule::SkipWhatDoesNotFit),
        "no waiter passed by a later one",
        10,
    );
    found.counterexample("no waiter passed by a later one");
}

/// Broken: a caller of another count admitted beside the holders of the
/// recorded one holds beside more than it asked for.
#[test]
fn a_semaphore_ignoring_the_recorded_count_exceeds_a_count() {
    let found = search(
        "semaphore, recorded count ignored",
        semaphore(CountedRule::IgnoreRecordedCount),
        "never more than N permits",
        10,
    );
    found.counterexample("never more than N permits");
}
