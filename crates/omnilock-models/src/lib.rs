//! Model-checked grant rules: the rules by which omnilock's stores grant
//! locks, written as small state machines and checked in every state they
//! can reach, for small sizes, with faults at every step.
//!
//! Each model follows one piece of the real code (its doc names the file
//! and the functions) and states the conformance scenario that checks the
//! same property against the real stores:
//!
//! | model | follows | properties |
//! |---|---|---|
//! | [`queue`] | the in-memory store's fair queue (`mem/mod.rs`) | at most one holder; no waiter passed by a later one |
//! | [`recipe`] | etcd's and ZooKeeper's ordered keys (`queue.rs` of each) | at most one holder; a holder's key is the oldest; no waiter passed |
//! | [`counted`] | semaphores and read-write locks (`mem/counted.rs`, etcd's `fits`) | never more than N permits; never a reader beside a writer; no writer starved |
//! | [`lock_all`] | `lock_all` (`multi.rs`) | no deadlock for any two overlapping sets |
//! | [`redlock`] | Redlock's rounds (`redlock/round.rs`) | two holders only after a documented condition |
//!
//! Faults are injected as steps the checker may take at any point, within
//! a budget per run ([`faults::Faults`]): a lease that runs out, a client
//! that crashes, a request applied twice (a retry), a waiting acquire that
//! is dropped; for Redlock, node restarts with and without persistence,
//! clock jumps and a holder's pause.
//!
//! Every model has broken variants (a rule with one check left out) for
//! which the checker must find a counterexample: that shows each property
//! can fail, so its passing means something.
//!
//! # The checker
//!
//! [stateright](https://docs.rs/stateright), the model checker made for
//! Rust: each model is a [`stateright::Model`], explored breadth first to
//! exhaustion ([`check::explore`]) or until a counterexample
//! ([`check::search`], which finds a shortest one). It builds in seconds
//! here: its dependencies are mostly those the workspace already builds.
//!
//! Safety properties are `always` properties. Those that are about order
//! (no waiter passed, no writer starved, no deadlock) are `always`
//! properties too, over a record the state keeps (whether a grant ever
//! passed a waiter still waiting) or over the steps a state allows (no
//! deadlock: some client can move, or all are done). Stateright's
//! `eventually` properties are not used: they are blind to a path that
//! ends in a cycle (its documentation says so), while an `always`
//! property over a record is checked in every state.
//!
//! # Running
//!
//! `cargo test -p omnilock-models`: one test file per model; each prints a
//! line with the states it reached, and each broken variant its
//! counterexample, step by step (`-- --nocapture` shows them). The sizes
//! and the state counts are in docs/semantics.md, *Model-checked rules*.
//!
//! The models are written by hand beside the code they follow, not
//! derived from it: a change to a grant rule needs the same change here,
//! and the conformance scenarios keep checking the code itself.

pub mod check;
pub mod counted;
pub mod faults;
pub mod lock_all;
pub mod queue;
pub mod recipe;
pub mod redlock;
