//! The conformance suite on the in-memory store: runs in plain `cargo test`.

use omnilock_testkit::Subject;

fn subject() -> Subject {
    Subject::new("mem", || omnilock::connect("mem://conformance"))
}

omnilock_testkit::conformance_main!(mem => subject());
