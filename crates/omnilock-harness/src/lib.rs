//! Tools for omnilock's own tests and benchmarks, kept out of the library
//! that applications link.
//!
//! [`probe`]: a store's own request counters and the raw "floor" round its
//! lock algorithm needs, both through a bare client of the store's usual
//! client library, opened from the same store URL omnilock takes. The herd
//! tests count requests per hand-off with it; `omnilock-bench` measures
//! omnilock against the floor with it.

pub mod probe;

pub use probe::Probe;
