//! omnilock's fault-injection harness and offline safety checker.
//!
//! One run (`omnilock-chaos run`) starts a protected register, client
//! processes (8 in CI, 16 in the long run) contending for one lock or many,
//! and a nemesis that kills, pauses or partitions the current holder, kills or
//! restarts a store node, or jumps a Redlock node's clock. Every
//! operation lands in a history (`history.jsonl`, invoke / ok / fail with the
//! machine's monotonic clock); the checker ([`checker::check`]) reads it
//! afterwards and counts stale writes, lost updates, token-order violations,
//! unnoticed lock losses, recovery times and locks left behind.
//! `docs/reliability.md` explains each figure and publishes a long run.
//!
//! ```
//! use omnilock_chaos::checker::check;
//! use omnilock_chaos::history::read;
//! let history = read("").unwrap();
//! assert!(check(&history).violations().is_empty());
//! ```

pub mod checker;
pub mod client;
pub mod history;
pub mod proxy;
pub mod register;
pub mod run;
