//! Tools for omnilock's own tests and benchmarks, kept out of the library
//! that applications link.
//!
//! [`probe`]: a store's own request counters and the raw "floor" round its
//! lock algorithm needs, both through a bare client of the store's usual
//! client library, opened from the same store URL omnilock takes. The herd
//! tests count requests per hand-off with it; `omnilock-bench` measures
//! omnilock against the floor with it.
//!
//! [`topology`]: the test stores as `scripts/stores.sh` started them
//! (`target/stores/topology.json`): deployments, nodes, ports, processes.
//!
//! [`faults`]: contention that records safety while a test breaks a store,
//! and the store faults themselves (kill, pause, restart a node of the
//! topology).
//!
//! [`process`]: cross-process scenarios, several `omnilock` commands
//! contending for one lock, and the helpers that run them (the CLI's tests).
//!
//! [`deadline`]: waiting on a started process with a deadline, so that a
//! test fails with a message where it would hang.
//!
//! [`heap`]: a global allocator that counts the heap bytes held live, for
//! the bench's memory per lock and the soak's leak verdict.

pub mod deadline;
pub mod elect;
pub mod faults;
pub mod heap;
pub mod job_rules;
pub mod operator;
pub mod probe;
pub mod process;
pub mod topology;

pub use probe::Probe;
