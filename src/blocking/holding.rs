//! [`Holding`]: what every blocking guard shares (the lock guard, the
//! leadership, the guard of several locks): the lost signal as a channel or
//! a callback, giving back on request, and giving back on drop without
//! blocking a runtime.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, mpsc};

use tokio::task::JoinHandle;

use super::{Runtime, inside_async, refuse_inside_async};
use crate::raw::lock_unpoisoned;
use crate::{Error, Operation, Result};

/// What a blocking guard or leadership wraps: something held that can be
/// lost and must be given back.
pub(super) trait Held: Send + 'static {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static;
    fn give_back(self) -> impl Future<Output = Result<()>>;
}

impl Held for crate::LockGuard {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        crate::LockGuard::lost(self)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> {
        self.release()
    }
}

impl Held for crate::MultiGuard {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        crate::MultiGuard::lost(self)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> {
        self.release()
    }
}

impl Held for crate::Leadership {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        crate::Leadership::lost(self)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> {
        self.resign()
    }
}

/// The machinery shared by the blocking guards: the lost
/// signal as a channel or a callback, giving back on request, and giving
/// back on drop without blocking a runtime.
pub(super) struct Holding<T: Held> {
    /// `None` only once given back or dropped.
    inner: Option<T>,
    /// Tasks forwarding the lost signal; they never end by themselves after
    /// a clean release, so the holding stops them.
    watchers: Mutex<Vec<JoinHandle<()>>>,
    runtime: Arc<Runtime>,
}

impl<T: Held> Holding<T> {
    pub(super) fn new(inner: T, runtime: Arc<Runtime>) -> Self {
        Holding {
            inner: Some(inner),
            watchers: Mutex::new(Vec::new()),
            runtime,
        }
    }

    pub(super) fn inner(&self) -> &T {
        self.inner
            .as_ref()
            .expect("only taken out by give_back or drop, which end the holding")
    }

    pub(super) fn lost_receiver(&self) -> mpsc::Receiver<Error> {
        let (tx, rx) = mpsc::channel();
        let lost = self.inner().lost();
        self.watch(async move {
            let _ = tx.send(lost.await);
        });
        rx
    }

    pub(super) fn on_lost(&self, callback: impl FnOnce(Error) + Send + 'static) {
        let lost = self.inner().lost();
        self.watch(async move {
            let loss = lost.await;
            // Not on the runtime's only worker: the callback may block, or
            // call this API, which refuses to run on a runtime thread.
            let spawned = std::thread::Builder::new()
                .name("omnilock-on-lost".into())
                .spawn(move || callback(loss));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "omnilock: cannot start a thread for on_lost");
            }
        });
    }

    fn watch(&self, task: impl Future<Output = ()> + Send + 'static) {
        let task = self.runtime.spawn(task);
        lock_unpoisoned(&self.watchers).push(task);
    }

    fn stop_watchers(&self) {
        for task in lock_unpoisoned(&self.watchers).drain(..) {
            task.abort();
        }
    }

    /// The loss, if it has happened (without waiting).
    pub(super) fn loss(&self) -> Option<Error> {
        let lost = std::pin::pin!(self.inner().lost());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match lost.poll(&mut context) {
            std::task::Poll::Ready(loss) => Some(loss),
            std::task::Poll::Pending => None,
        }
    }

    /// What is held, taken out without giving it back (the lost watchers
    /// stop, so their channels disconnect).
    pub(super) fn into_inner(mut self) -> T {
        self.stop_watchers();
        self.inner
            .take()
            .expect("only taken out by give_back or drop, which end the holding")
    }

    /// The runtime the holding gives back on.
    pub(super) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// What is held, unless already given back.
    pub(super) fn get(&self) -> Option<&T> {
        self.inner.as_ref()
    }

    pub(super) fn give_back(mut self) -> Result<()> {
        // Checked first: refused here, the drop gives it back instead.
        refuse_inside_async(Some(Operation::Release))?;
        self.stop_watchers();
        let Some(inner) = self.inner.take() else {
            return Ok(());
        };
        self.runtime
            .block_on(Operation::Release, inner.give_back())?
    }
}

impl<T: Held> Drop for Holding<T> {
    fn drop(&mut self) {
        self.stop_watchers();
        let Some(inner) = self.inner.take() else {
            return;
        };
        let runtime = self.runtime.clone();
        if !inside_async() {
            // Given back before `drop` returns, as blocking code expects: the
            // next `acquire` anywhere can succeed at once. A panic in here
            // (tokio's thread-locals already gone at thread exit) must not
            // escape a destructor; the core guard then releases in the
            // background or the lease frees the lock.
            let released = catch_unwind(AssertUnwindSafe(move || {
                let _ = runtime.tokio().block_on(inner.give_back());
            }));
            if released.is_err() {
                tracing::warn!("omnilock: could not release on drop; the lease frees the lock");
            }
            return;
        }
        // On a runtime thread (possibly omnilock's own worker, which the
        // release needs), blocking could stall or deadlock: release on a
        // thread of its own. If none can start, the closure and the core
        // guard in it are dropped, and the core guard releases in the
        // background.
        let spawned = std::thread::Builder::new()
            .name("omnilock-release".into())
            .spawn(move || {
                let _ = runtime.tokio().block_on(inner.give_back());
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "omnilock: cannot start a thread to release on drop");
        }
    }
}

/// Writes the methods the blocking guards share over their `holding`
/// field (the lock guard, the guard of several locks, the leadership), each
/// with one text and an example, inside the guard's `impl` block:
///
/// ```text
/// holding_methods! {
///     is_held, safe_until, lost_receiver, on_lost, release;
///     "lines that make `locks`, and `held` holding the lock `name`"
/// }
/// ```
///
/// The first line lists exactly the methods written, so that a reader of
/// the source (`tests/blocking_parity.rs`) sees them.
macro_rules! holding_methods {
    ($($method:ident),+; $setup:literal) => {
        $($crate::blocking::holding::holding_methods!(@method $method $setup);)+
    };
    (@method is_held $setup:literal) => {
        /// Whether the lock (for several locks: every part) is still known
        /// to be held: not lost, not released, and the lease still valid by
        /// the local clock.
        ///
        /// ```
        #[doc = $setup]
        /// assert!(held.is_held());
        /// locks.break_lock(name)?;
        /// let _ = held.lost_receiver().recv(); // the loss arrives
        /// assert!(!held.is_held());
        /// # Ok::<(), omnilock::Error>(())
        /// ```
        pub fn is_held(&self) -> bool {
            self.holding.inner().is_held()
        }
    };
    (@method safe_until $setup:literal) => {
        /// Until when, by this process's clock, the lock (for several
        /// locks: every part) is known to be held. Work that must finish
        /// under the lock should finish before it.
        ///
        /// ```
        #[doc = $setup]
        /// assert!(held.safe_until() > std::time::Instant::now());
        /// # Ok::<(), omnilock::Error>(())
        /// ```
        pub fn safe_until(&self) -> std::time::Instant {
            self.holding.inner().safe_until()
        }
    };
    (@method lost_receiver $setup:literal) => {
        /// A channel that receives the loss (an
        /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) error naming
        /// the lock; for several locks, the first part lost) if the lock is
        /// lost while this lives. After a clean release (or resignation) or
        /// drop it disconnects instead (`recv` returns `Err`). Each call
        /// makes a new channel; a loss that already happened arrives at once.
        ///
        /// ```
        /// use std::time::Duration;
        #[doc = $setup]
        /// let lost = held.lost_receiver();
        /// locks.break_lock(name)?;
        /// let loss = lost.recv_timeout(Duration::from_secs(10)).expect("lost");
        /// assert_eq!(loss.kind(), omnilock::ErrorKind::LockLost);
        /// assert_eq!(loss.lock(), Some(name));
        /// # Ok::<(), omnilock::Error>(())
        /// ```
        pub fn lost_receiver(&self) -> std::sync::mpsc::Receiver<crate::Error> {
            self.holding.lost_receiver()
        }
    };
    (@method on_lost $setup:literal) => {
        /// Calls `callback` with the loss (as
        /// [`lost_receiver`](Self::lost_receiver) receives it) if the lock
        /// is lost while this lives; never after a clean release (or
        /// resignation) or drop. It runs on a thread of its own, so it may
        /// block and may use this API.
        ///
        /// ```
        /// use std::time::Duration;
        #[doc = $setup]
        /// let (tx, rx) = std::sync::mpsc::channel();
        /// held.on_lost(move |loss| {
        ///     eprintln!("stop writing: {loss}");
        ///     let _ = tx.send(loss.kind());
        /// });
        /// locks.break_lock(name)?;
        /// let kind = rx.recv_timeout(Duration::from_secs(10));
        /// assert_eq!(kind, Ok(omnilock::ErrorKind::LockLost));
        /// # Ok::<(), omnilock::Error>(())
        /// ```
        pub fn on_lost(&self, callback: impl FnOnce(crate::Error) + Send + 'static) {
            self.holding.on_lost(callback)
        }
    };
    (@method release $setup:literal) => {
        /// Releases (for several locks: every part) and waits for the store
        /// to confirm; the first error, if any, after trying every part. A
        /// stale guard (lost, or its lease ran out and someone else took
        /// the lock) gets [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner)
        /// and changes nothing.
        ///
        /// ```
        #[doc = $setup]
        /// held.release()?;
        /// assert!(locks.try_acquire(name)?.is_some());
        /// # Ok::<(), omnilock::Error>(())
        /// ```
        pub fn release(self) -> crate::Result<()> {
            self.holding.give_back()
        }
    };
}

pub(super) use holding_methods;
