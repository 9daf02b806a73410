//! The heart of omnilock: lock semantics, the [`Backend`] contract every
//! store implements, the machinery written once for all of them (reentrancy
//! within a process, lease renewal, the lost-lock signal, release on drop,
//! retry with backoff and jitter), and the in-memory store `mem://`.
//!
//! Applications normally use the `omnilock` facade crate and its `connect`
//! function; backend crates depend on this one.
//!
//! The guarantees are written out in [docs/semantics.md](https://github.com/omnilock/omnilock/blob/main/docs/semantics.md); the conformance
//! suite in `omnilock-testkit` checks each of them on every backend.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> omnilock_core::Result<()> {
//! use omnilock_core::{Locks, MemStore, Owner};
//! use std::time::Duration;
//!
//! let locks = Locks::new(MemStore::new());
//! let me = Owner::random();
//! let outer = locks.lock("accounts/42").owner(&me).ttl(Duration::from_secs(10)).acquire().await?;
//! // The same owner re-enters at once; the token stays the same.
//! let inner = locks.lock("accounts/42").owner(&me).acquire().await?;
//! assert_eq!(inner.token(), outer.token());
//! assert_eq!(outer.hold_count(), 2);
//! inner.release().await?;
//! outer.release().await?;
//! # Ok(()) }
//! ```

mod backend;
mod capabilities;
mod cleanup;
mod client;
mod detach;
mod driver;
mod dyn_backend;
mod election;
mod error;
pub mod fence;
mod guard;
mod hold;
mod inspect;
mod local;
pub mod mem;
pub mod metrics;
mod multi;
mod name;
mod options;
mod record;
mod renewal;
mod request;
mod retry;
mod sessions;
mod shared;
mod signal;
mod sync;
mod tls;
mod url;

pub use backend::{
    AcquireRequest, Backend, Capabilities, Grant, Holder, HolderChange, LockSpec, Primitive,
    RW_CAPACITY, Share, mutex_grant,
};
pub use cleanup::{SETTLE_WITHIN, settle, spawn_cleanup};
pub use client::{DEFAULT_TTL, Locks, MAX_TTL, MIN_TTL, check_ttl};
pub use detach::{CompleteOrUndo, complete_or_undo};
pub use driver::{Connecting, Driver};
pub use dyn_backend::{DynBackend, ErasedGrant};
pub use election::{Candidate, Election, Leader, Leadership, MAX_ELECTION_VALUE_BYTES, Observer};
pub use error::{Error, ErrorKind, Operation, Result};
pub use guard::LockGuard;
pub use inspect::{Held, Inspection, Listed, LockKind, Side, Waiting};
pub use local::LocalWaiters;
pub use mem::MemStore;
pub use multi::{MultiGuard, MultiLockRequest};
pub use name::{LockName, MAX_NAME_BYTES, Owner};
pub use options::{AcquireOptions, check_hold_bounds};
pub use record::{MAX_RECORD_BYTES, MAX_RECORD_KEEP, Record};
pub use request::{LockRequest, ReadWriteLock};
pub use retry::{Backoff, retry, retry_in_background, retry_when};
pub use sessions::SessionsPerTtl;
pub use signal::{LostNotifier, SessionGuards, WaitNotice};
pub use sync::lock_unpoisoned;
#[cfg(feature = "pem")]
pub use tls::ensure_crypto_provider;
pub use tls::{TlsFiles, TlsPem};
pub use url::{HostPort, Secret, StoreUrl, check_timeouts, parse_duration};

/// Re-exported so backend crates implement [`Backend`] with the same macro.
pub use async_trait::async_trait;
