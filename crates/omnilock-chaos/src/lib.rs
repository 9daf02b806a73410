//! omnilock's fault-injection harness and offline safety checker.
//!
//! One run (`omnilock-chaos run`) starts a protected register, client
//! processes (8 in CI, 16 in the long run) contending for one lock or many,
//! and a nemesis that kills, pauses or partitions the current holder (from
//! every store node, or from a minority of them), kills or restarts a store
//! node, jumps a Redlock node's clock, or builds Kleppmann's Redlock case (a
//! lock standing on a bare majority, one of whose nodes restarts empty). Every
//! operation lands in a history (`history.jsonl`, invoke / ok / fail with the
//! machine's monotonic clock); the checker ([`checker::check`]) reads it
//! afterwards and counts stale writes, lost updates, token-order violations,
//! unnoticed lock losses, recovery times and locks left behind. With
//! `--primitive semaphore:N` or `rw` the clients take semaphore permits or
//! read-write lock sides instead, and the checker counts the holders
//! against the capacity. The protected resource may also be a table in the
//! lock's own SQL database ([`records`]), a log in the lock's own store
//! ([`logs`]), written through the store's guard, a fenced key, or neither,
//! or a document rewritten whole through a fenced file or table
//! ([`documents`]).
//! `docs/reliability.md` explains each figure and publishes a long run.
//!
//! A soak (`omnilock-chaos soak`, [`soak`]) is the other kind of run: one
//! process loads every store at once for an hour while store nodes are
//! paused and restarted, samples its own memory, descriptors, connections
//! and tasks, and fails when one of them keeps growing.
//!
//! ```
//! use omnilock_chaos::checker::check;
//! use omnilock_chaos::history::read;
//! let history = read("").unwrap();
//! assert!(check(&history).violations().is_empty());
//! ```

pub mod byo;
pub mod checker;
pub mod client;
pub mod documents;
pub mod history;
pub mod logs;
pub mod primitive;
pub mod proxy;
pub mod records;
pub mod register;
pub mod run;
pub mod soak;
