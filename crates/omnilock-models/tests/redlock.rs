//! Redlock over 3 nodes and 2 clients: two holders only after a condition
//! docs/backends/redis.md names (see `omnilock_models::redlock`).

use omnilock_models::check::{explore, search};
use omnilock_models::redlock::{DRIFT, RedlockFaults, RedlockModel, RedlockRule, Restart};

const NO_FAULTS: RedlockFaults = RedlockFaults {
    restarts: (0, Restart::Persistent),
    jumps: (0, 0),
    pauses: 0,
    crashes: 0,
};

/// One TTL of time, the store's rule.
fn model(faults: RedlockFaults) -> RedlockModel {
    RedlockModel {
        horizon: omnilock_models::redlock::TTL,
        faults,
        rule: RedlockRule::Store,
        stop_at_condition: true,
        symmetry: true,
    }
}

/// Every state where two clients hold comes after a documented condition,
/// and such a state can be reached.
fn only_after(name: &str, faults: RedlockFaults, min_states: usize) {
    explore(name, model(faults)).assert_holds(min_states);
    let unpruned = RedlockModel {
        stop_at_condition: false,
        ..model(faults)
    };
    let found = search(&format!("{name}, two holders"), unpruned, "two holders", 20);
    found.example("two holders");
    let only_after = "two holders only after a documented condition";
    assert!(
        found.counterexamples.iter().all(|(p, _)| *p != only_after),
        "{name}: two holders with no documented condition"
    );
}

#[test]
fn one_holder_through_persistent_restarts_and_crashes() {
    let faults = RedlockFaults {
        restarts: (1, Restart::Persistent),
        crashes: 1,
        ..NO_FAULTS
    };
    explore("redlock, persistent restart, crash", model(faults)).assert_holds(50_000);
}

#[test]
fn one_holder_when_an_empty_node_waits_a_ttl_before_serving() {
    let faults = RedlockFaults {
        restarts: (1, Restart::EmptyAfterTtl),
        crashes: 1,
        ..NO_FAULTS
    };
    explore("redlock, empty restart after a TTL, crash", model(faults)).assert_holds(50_000);
}

#[test]
fn one_holder_through_clock_jumps_within_the_drift() {
    let faults = RedlockFaults {
        jumps: (1, DRIFT),
        ..NO_FAULTS
    };
    explore("redlock, clock jump within the drift", model(faults)).assert_holds(50_000);
}

#[test]
fn two_holders_only_after_a_node_restarts_empty() {
    let faults = RedlockFaults {
        restarts: (1, Restart::Empty),
        ..NO_FAULTS
    };
    only_after("redlock, empty restart", faults, 30_000);
}

#[test]
fn two_holders_only_after_a_clock_jumps_past_the_drift() {
    let faults = RedlockFaults {
        jumps: (1, DRIFT + 1),
        ..NO_FAULTS
    };
    only_after("redlock, clock jump past the drift", faults, 10_000);
}

#[test]
fn two_holders_only_after_a_holder_pauses_past_its_validity() {
    let faults = RedlockFaults {
        pauses: 1,
        ..NO_FAULTS
    };
    only_after("redlock, pause past the validity", faults, 10_000);
}

/// Broken: a hold counted valid from the last answer, not from the round's
/// start, gives two holders with no fault at all.
#[test]
fn validity_counted_from_the_answer_gives_two_holders() {
    let broken = RedlockModel {
        rule: RedlockRule::ValidityFromAnswer,
        ..model(NO_FAULTS)
    };
    let found = search(
        "redlock, validity from the answer",
        broken,
        "at most one holder",
        20,
    );
    found.counterexample("at most one holder");
}
