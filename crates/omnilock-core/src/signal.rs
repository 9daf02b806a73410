//! The lost-lock signal and the "now waiting" notice that backends raise.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use crate::error::{Error, ErrorKind};
use crate::sync::lock_unpoisoned;

/// The sending side of a guard's lost signal, handed to the backend with each
/// acquisition so that a store that learns of a loss by itself (a session
/// expiring, a lease revoked) can say so at once instead of at the next renewal.
///
/// Firing is idempotent: the first loss is the one guards report.
#[derive(Clone)]
pub struct LostNotifier {
    inner: Arc<Lost>,
}

/// A small cell rather than a `watch` channel: one of these lives in every
/// held lock, and a process may hold 100,000 (a `watch` sender is several
/// hundred bytes).
struct Lost {
    loss: Mutex<Option<Error>>,
    fired: Notify,
}

impl LostNotifier {
    /// A new, unfired signal.
    pub fn new() -> Self {
        LostNotifier {
            inner: Arc::new(Lost {
                loss: Mutex::new(None),
                fired: Notify::new(),
            }),
        }
    }

    /// Marks the lock as lost for `cause`. The loss is of kind
    /// [`ErrorKind::LockLost`]; any other `cause` becomes its source, kind,
    /// backend and cause intact (see [`Error::into_lock_lost`]).
    pub fn fire(&self, cause: Error) {
        let cause = cause.into_lock_lost();
        {
            let mut loss = lock_unpoisoned(&self.inner.loss);
            if loss.is_some() {
                return;
            }
            tracing::warn!(error = %cause, "omnilock lock lost");
            *loss = Some(cause);
        }
        self.inner.fired.notify_waiters();
    }

    /// Whether `other` is this same signal (not merely an equal one).
    pub fn same_as(&self, other: &LostNotifier) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the signal has fired.
    pub fn is_fired(&self) -> bool {
        lock_unpoisoned(&self.inner.loss).is_some()
    }

    /// The loss, if the signal has fired.
    pub fn loss(&self) -> Option<Error> {
        lock_unpoisoned(&self.inner.loss).clone()
    }

    /// A future that completes with the loss when the signal fires, and
    /// never completes if the lock is released (or the acquisition ends)
    /// without being lost: completing then would be a false alarm to whoever
    /// watches for losses in another task (the fault harness caught exactly
    /// that).
    pub fn fired(&self) -> impl Future<Output = Error> + Send + 'static + use<> {
        let inner = self.inner.clone();
        async move {
            loop {
                let fired = inner.fired.notified();
                tokio::pin!(fired);
                // Registered before looking, so a fire in between wakes it.
                fired.as_mut().enable();
                if let Some(loss) = lock_unpoisoned(&inner.loss).clone() {
                    return loss;
                }
                fired.await;
            }
        }
    }
}

impl Default for LostNotifier {
    fn default() -> Self {
        LostNotifier::new()
    }
}

impl fmt::Debug for LostNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostNotifier")
            .field("fired", &self.is_fired())
            .finish()
    }
}

/// The guards that depend on one store session (an etcd lease, a ZooKeeper
/// session): when the session ends, every one of them is told at once, and a
/// guard registered after that is told on arrival. Backends with sessions
/// keep one of these per session instead of each writing the bookkeeping.
///
/// ```
/// use omnilock_core::{Error, ErrorKind, LostNotifier, SessionGuards};
/// let session = SessionGuards::new();
/// let lost = LostNotifier::new();
/// let ticket = session.register(&lost);
/// assert!(session.end(Error::new(ErrorKind::LockLost, "lease expired")));
/// assert!(lost.is_fired());
/// assert!(session.ended().is_some());
/// session.unregister(ticket);
/// ```
#[derive(Debug)]
pub struct SessionGuards {
    guards: Mutex<std::collections::HashMap<u64, LostNotifier>>,
    next: std::sync::atomic::AtomicU64,
    ended: watch::Sender<Option<Error>>,
}

impl SessionGuards {
    /// A live session with no guards.
    pub fn new() -> Self {
        SessionGuards {
            guards: Mutex::new(std::collections::HashMap::new()),
            next: std::sync::atomic::AtomicU64::new(1),
            ended: watch::channel(None).0,
        }
    }

    /// Remembers a guard's lost signal; returns its ticket for
    /// [`unregister`](Self::unregister). Fires at once if the session has
    /// already ended.
    pub fn register(&self, lost: &LostNotifier) -> u64 {
        let ticket = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(ticket, lost.clone());
        if let Some(cause) = self.ended() {
            lost.fire(cause);
        }
        ticket
    }

    /// Forgets a released guard.
    pub fn unregister(&self, ticket: u64) {
        self.lock().remove(&ticket);
    }

    /// Ends the session for `cause` and fires every registered guard.
    /// Returns whether this call ended it (only the first cause counts).
    pub fn end(&self, cause: Error) -> bool {
        let fresh = self.ended.send_if_modified(|ended| {
            if ended.is_some() {
                return false;
            }
            *ended = Some(cause.clone());
            true
        });
        if fresh {
            let guards: Vec<_> = self.lock().drain().map(|(_, g)| g).collect();
            for lost in guards {
                lost.fire(cause.clone());
            }
        }
        fresh
    }

    /// Why the session ended, if it has.
    pub fn ended(&self) -> Option<Error> {
        self.ended.borrow().clone()
    }

    /// Completes with the cause once the session ends.
    pub fn wait_ended(&self) -> impl Future<Output = Error> + Send + 'static + use<> {
        let mut rx = self.ended.subscribe();
        async move {
            match rx.wait_for(Option::is_some).await {
                Ok(cause) => cause.clone().expect("waited for Some"),
                Err(_) => Error::new(ErrorKind::LockLost, "the session was dropped"),
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, LostNotifier>> {
        lock_unpoisoned(&self.guards)
    }
}

impl Default for SessionGuards {
    fn default() -> Self {
        SessionGuards::new()
    }
}

type Callback = Box<dyn FnOnce() + Send>;

/// Raised once by a backend when a waiting acquire starts to wait: for a fair
/// backend, the moment its place in the queue is fixed; otherwise, when it
/// first finds the lock busy. Callers use it to print "waiting for ..." and
/// tests use it to queue waiters in a known order without sleeping.
#[derive(Clone, Default)]
pub struct WaitNotice {
    callback: Arc<Mutex<Option<Callback>>>,
}

impl WaitNotice {
    /// A notice that runs `callback` the first time it is raised.
    pub fn new(callback: impl FnOnce() + Send + 'static) -> Self {
        WaitNotice {
            callback: Arc::new(Mutex::new(Some(Box::new(callback)))),
        }
    }

    /// A notice nobody listens to.
    pub fn none() -> Self {
        WaitNotice::default()
    }

    /// Raises the notice; only the first call does anything.
    pub fn raise(&self) {
        let callback = self.callback.lock().ok().and_then(|mut c| c.take());
        if let Some(callback) = callback {
            callback();
        }
    }
}

impl fmt::Debug for WaitNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WaitNotice")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_loss_wins() {
        let lost = LostNotifier::new();
        let fired = lost.fired();
        lost.fire(Error::unavailable("first"));
        lost.fire(Error::unavailable("second"));
        let err = fired.await;
        assert_eq!(err.kind(), ErrorKind::LockLost);
        let first = |err: &Error| err.underlying().map(|e| e.message().to_string());
        assert_eq!(first(&err).as_deref(), Some("first"));
        assert_eq!(first(&lost.fired().await).as_deref(), Some("first"));
    }

    #[test]
    fn notice_runs_once() {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = count.clone();
        let notice = WaitNotice::new(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        notice.raise();
        notice.clone().raise();
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
