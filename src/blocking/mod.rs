//! A synchronous API for programs without an async runtime, in the manner of
//! `reqwest::blocking`: the same stores, semantics and errors as the async
//! API, with calls that block the calling thread until they are done.
//!
//! ```
//! use std::time::Duration;
//!
//! let locks = omnilock::blocking::connect("mem://blocking-intro?ttl=10s")?;
//! let guard = locks.lock("billing/close-month").timeout(Duration::from_secs(30)).acquire()?;
//! println!("token {}", guard.token());
//! guard.release()?;
//! # Ok::<(), omnilock::Error>(())
//! ```
//!
//! Each blocking type wraps its async twin ([`LockRequest`] wraps
//! [`crate::LockRequest`], [`Candidate`] wraps [`crate::Candidate`], ...):
//! options are handed straight to the async request, and the finishing call
//! (`acquire`, `campaign`, `release`, ...) runs the async one to completion.
//! The two APIs have the same methods, apart from the differences a test
//! (`tests/blocking_parity.rs`) lists: where the async API returns a future
//! to await (`lost`), the blocking one offers a channel and a callback
//! (`lost_receiver`, `on_lost`).
//!
//! # The runtime inside
//! Each [`connect`] starts a small tokio runtime of its own (one worker
//! thread, named `omnilock-blocking`) that renews leases, watches for lost
//! locks and drives the store's connections. Every clone of the [`Locks`]
//! handle and every guard share it; it stops when the last of them is
//! dropped. Connect once and clone the handle rather than connecting per
//! call. A handle can be used from many threads at once: each call blocks
//! only its own thread.
//!
//! # Not inside an async runtime
//! Blocking a thread of an async runtime stalls every task scheduled on it,
//! and on omnilock's own runtime it could deadlock. So every blocking call
//! made on a thread that is inside a tokio runtime (a task, a runtime worker,
//! or `tokio::task::spawn_blocking`) returns at once an error of kind
//! [`ErrorKind::WouldDeadlock`] saying so, instead of blocking. Use the async
//! API ([`crate::connect`]) there, or call from a thread of your own
//! (`std::thread::spawn`).
//!
//! A guard dropped on such a thread cannot wait for its release: it releases
//! on a short-lived thread of its own instead, so dropping never blocks a
//! runtime, deadlocks or panics (see [`LockGuard`]).
//!
//! Several locks taken as one ([`Locks::lock_all`]) and leader elections
//! ([`Locks::election`], followed with [`Election::observe`]) are here too.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{Error, ErrorKind, Operation, Result};

mod election;
mod guard;
mod holding;
mod locks;
mod multi;
mod request;

/// The options of an acquisition, for any blocking request's `options`
/// (the same type as the async API's).
pub use crate::AcquireOptions;
pub use election::{Candidate, Election, Leadership, Observer};
pub use guard::LockGuard;
pub use locks::Locks;
pub use multi::{MultiGuard, MultiLockRequest};
pub use request::{LockRequest, ReadWriteLock};

/// How long dropping the last handle waits for the runtime's threads to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Connects to the store named by `url` (the same URLs as
/// [`crate::connect`]), starting the runtime this handle and its clones
/// share.
///
/// Errors: those of [`crate::connect`]; [`ErrorKind::Unavailable`] if the
/// runtime cannot start; [`ErrorKind::WouldDeadlock`] when called inside an
/// async runtime (see the [module docs](self)).
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// assert_eq!(locks.backend_kind(), "mem");
/// let err = omnilock::blocking::connect("nosuch://host").unwrap_err();
/// assert_eq!(err.kind(), omnilock::ErrorKind::InvalidConfig);
/// # Ok::<(), omnilock::Error>(())
/// ```
pub fn connect(url: &str) -> Result<Locks> {
    refuse_inside_async(Some(Operation::Connect))?;
    let runtime = Runtime::start()?;
    let inner = runtime.block_on(Operation::Connect, crate::connect(url))??;
    Ok(Locks::new(inner, runtime))
}

/// Whether this thread is inside a tokio runtime, where blocking is refused.
fn inside_async() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// The [`ErrorKind::WouldDeadlock`] refusal, when on a runtime thread.
fn refuse_inside_async(operation: Option<Operation>) -> Result<()> {
    if inside_async() {
        let err = Error::new(
            ErrorKind::WouldDeadlock,
            "omnilock::blocking was called inside an async runtime, where blocking would \
             stall (or deadlock) it: use the async API (omnilock::connect) there, or call \
             from a thread of your own (std::thread::spawn)",
        )
        .with_retryable(false);
        return Err(match operation {
            Some(operation) => err.with_operation(operation),
            None => err,
        });
    }
    Ok(())
}

/// The runtime one [`connect`] started, shared by its handles and guards.
struct Runtime {
    /// `None` only while being dropped.
    tokio: Option<tokio::runtime::Runtime>,
}

impl Runtime {
    fn start() -> Result<Arc<Self>> {
        // One worker is plenty: it only renews leases, watches signals and
        // drives connections; the callers' threads poll their own calls.
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("omnilock-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::unavailable(format!("cannot start omnilock's runtime: {e}"))
                    .with_operation(Operation::Connect)
            })?;
        Ok(Arc::new(Runtime { tokio: Some(tokio) }))
    }

    fn tokio(&self) -> &tokio::runtime::Runtime {
        self.tokio
            .as_ref()
            .expect("the runtime lives until dropped")
    }

    /// Runs `future` to completion on the calling thread; refused inside an
    /// async runtime.
    fn block_on<F: Future>(
        &self,
        operation: impl Into<Option<Operation>>,
        future: F,
    ) -> Result<F::Output> {
        refuse_inside_async(operation.into())?;
        Ok(self.tokio().block_on(future))
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        self.tokio().spawn(task)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(tokio) = self.tokio.take() else {
            return;
        };
        // Waiting for the worker to stop is not allowed on a runtime thread
        // (tokio panics), and the last handle may well be dropped there, e.g.
        // by an `on_lost` callback that owned it.
        if inside_async() {
            tokio.shutdown_background();
        } else {
            tokio.shutdown_timeout(SHUTDOWN_GRACE);
        }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Runtime")
    }
}
