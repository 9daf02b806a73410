//! The conformance scenarios for `omnilock::blocking`, driven from std
//! threads (no async runtime in the test), so the synchronous API is held to
//! the same guarantees as the async one.
//!
//! ```ignore
//! omnilock_testkit::blocking_tests!(omnilock_testkit::blocking::BlockingSubject::url("mem", "mem://b"));
//! ```
//!
//! Waits are on events (channels, joins) bounded by generous timeouts; the
//! only sleeps are where time passing is the point.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use omnilock::blocking::{self, LockGuard, Locks};
use omnilock_core::{ErrorKind, Operation, Owner, Result};

/// A bound for what should happen "at once" or "soon" (stores stall now and then).
const PATIENCE: Duration = Duration::from_secs(10);

type ConnectFn = dyn Fn() -> Result<Locks> + Send + Sync;

/// The store under test, for the blocking API: a label and a way to open
/// independent blocking clients to it.
#[derive(Clone)]
pub struct BlockingSubject {
    label: String,
    connect: Arc<ConnectFn>,
}

impl BlockingSubject {
    /// A subject whose clients come from `connect`.
    pub fn new(
        label: impl Into<String>,
        connect: impl Fn() -> Result<Locks> + Send + Sync + 'static,
    ) -> Self {
        BlockingSubject {
            label: label.into(),
            connect: Arc::new(connect),
        }
    }

    /// A subject whose clients are `omnilock::blocking::connect(url)`.
    pub fn url(label: impl Into<String>, url: impl Into<String>) -> Self {
        let url = url.into();
        BlockingSubject::new(label, move || blocking::connect(&url))
    }

    /// The label used in messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Opens a new, independent client; panics (fails the test) if the
    /// store cannot be reached.
    pub fn client(&self) -> Locks {
        match (self.connect)() {
            Ok(locks) => locks,
            Err(e) => panic!(
                "{}: cannot connect to the store under test: {e}",
                self.label
            ),
        }
    }

    fn clients<const N: usize>(&self) -> [Locks; N] {
        std::array::from_fn(|_| self.client())
    }
}

/// Expands to one `#[test]` per blocking scenario for the subject that
/// `$subject` evaluates to (a `BlockingSubject` or an
/// `Option<BlockingSubject>`; `None` skips).
#[macro_export]
macro_rules! blocking_tests {
    ($subject:expr) => {
        $crate::blocking_tests!(@each $subject;
            blocking_mutual_exclusion,
            blocking_try_acquire_when_held,
            blocking_timeout_is_typed,
            blocking_release_by_owner_only,
            blocking_tokens_rise,
            blocking_reentrancy,
            blocking_drop_releases_to_waiting_thread,
            blocking_drop_inside_runtime,
            blocking_refused_inside_runtime,
            blocking_lost_fires_channel_and_callback,
            blocking_release_is_not_a_loss,
            blocking_with_lock,
            blocking_close,
            blocking_invalid_names,
            blocking_election,
        );
    };
    (@each $subject:expr; $($scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                let subject: Option<$crate::blocking::BlockingSubject> = ($subject).into();
                if let Some(subject) = subject {
                    $crate::blocking::$scenario(&subject);
                }
            }
        )*
    };
}

fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "blocking/{prefix}/{:08x}-{}",
        nanos ^ std::process::id().rotate_left(16),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn skip(subject: &BlockingSubject, scenario: &str, why: &str) {
    eprintln!(
        "{}: {scenario}: not claimed ({why}); skipped",
        subject.label()
    );
}

/// Starts a thread that waits for `name` on `locks` and returns once the
/// store reports it waiting; the thread's result is the acquire's.
fn queue_waiter(locks: &Locks, name: &str) -> thread::JoinHandle<Result<LockGuard>> {
    let (queued_tx, queued_rx) = mpsc::channel();
    let locks = locks.clone();
    let name = name.to_string();
    let waiter = thread::spawn(move || {
        locks
            .lock(&name)
            .ttl(Duration::from_secs(60))
            .timeout(Duration::from_secs(120))
            .on_wait(move || {
                let _ = queued_tx.send(());
            })
            .acquire()
    });
    queued_rx
        .recv_timeout(PATIENCE)
        .expect("a waiting thread reports that it waits");
    waiter
}

/// Joins `thread`, failing if it takes longer than [`PATIENCE`].
fn join_soon<T: Send + 'static>(what: &str, thread: thread::JoinHandle<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    while !thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{what}: did not happen within {PATIENCE:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
    thread
        .join()
        .unwrap_or_else(|_| panic!("{what}: the thread panicked"))
}

/// 8 threads over 2 clients each increment a shared non-atomic counter 20
/// times under the lock: exactly 160, and never two threads inside at once.
pub fn blocking_mutual_exclusion(subject: &BlockingSubject) {
    let name = unique("exclusion");
    let clients: [Locks; 2] = subject.clients();
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let locks = clients[i % clients.len()].clone();
            let (name, counter, inside) = (name.clone(), counter.clone(), inside.clone());
            thread::spawn(move || {
                for _ in 0..20 {
                    let guard = locks
                        .lock(&name)
                        .timeout(Duration::from_secs(120))
                        .acquire()
                        .expect("acquire");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    // Read, yield, write: any overlap loses an increment.
                    let seen = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().expect("release");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("worker thread");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 160);
}

/// try_acquire on a held lock answers `None` at once; once released, it
/// takes the lock.
pub fn blocking_try_acquire_when_held(subject: &BlockingSubject) {
    let name = unique("try");
    let [a, b] = subject.clients();
    let held = a.acquire(&name).expect("acquire");
    let started = Instant::now();
    assert!(
        b.try_acquire(&name).expect("try_acquire").is_none(),
        "took a held lock"
    );
    assert!(
        started.elapsed() < PATIENCE,
        "try_acquire waited {:?}",
        started.elapsed()
    );
    held.release().expect("release");
    let taken = b.try_acquire(&name).expect("try_acquire");
    assert!(taken.is_some(), "try_acquire failed on a free lock");
}

/// A waiting acquire with a timeout fails with a Timeout error that names
/// the backend, operation and lock; the holder keeps the lock.
pub fn blocking_timeout_is_typed(subject: &BlockingSubject) {
    let name = unique("timeout");
    let [a, b] = subject.clients();
    let held = a.acquire(&name).expect("acquire");
    let started = Instant::now();
    let err = b
        .lock(&name)
        .timeout(Duration::from_millis(200))
        .acquire()
        .expect_err("acquire of a held lock must time out");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(err.operation(), Some(Operation::Acquire));
    assert_eq!(err.lock(), Some(name.as_str()));
    assert_eq!(err.backend(), Some(b.backend_kind()));
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(
        started.elapsed() < PATIENCE,
        "timeout took {:?}",
        started.elapsed()
    );
    assert!(held.is_held());
    held.release().expect("release");
}

/// Only the owner's guard releases the lock: a stale guard (its lock broken
/// and taken by another) gets NotOwner and leaves the new holder alone.
pub fn blocking_release_by_owner_only(subject: &BlockingSubject) {
    let name = unique("owner");
    let [a, b, admin] = subject.clients();
    let first = a.acquire(&name).expect("first holder");
    assert!(b.try_acquire(&name).expect("probe").is_none());
    first.release().expect("owner releases");
    if !admin.capabilities().break_lock {
        return skip(
            subject,
            "blocking_release_by_owner_only (stale part)",
            "cannot break locks",
        );
    }
    let stale = a.acquire(&name).expect("holder");
    assert!(admin.break_lock(&name).expect("break"));
    let fresh = b
        .lock(&name)
        .timeout(PATIENCE)
        .acquire()
        .expect("a new holder takes the broken lock");
    let err = stale.release().expect_err("a stale guard must not release");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    assert!(fresh.is_held());
    assert!(
        admin.try_acquire(&name).expect("probe").is_none(),
        "the stale release freed the new holder's lock"
    );
    fresh.release().expect("the new holder releases");
}

/// Fencing tokens strictly increase over grants by alternating clients,
/// whether the previous guard was released or dropped.
pub fn blocking_tokens_rise(subject: &BlockingSubject) {
    let clients: [Locks; 2] = subject.clients();
    if !clients[0].capabilities().fencing {
        return skip(subject, "blocking_tokens_rise", "no fencing tokens");
    }
    let name = unique("fencing");
    let mut last = 0;
    for i in 0..20 {
        let guard = clients[i % 2].acquire(&name).expect("acquire");
        assert!(guard.token() > last, "token {} after {last}", guard.token());
        last = guard.token();
        if i % 2 == 0 {
            guard.release().expect("release");
        } else {
            drop(guard);
        }
    }
}

/// The same owner re-enters (same token, hold count up) while others are
/// kept out until the last hold is released; non-reentrant re-acquires fail
/// with WouldDeadlock. Across clients only where the store claims it.
pub fn blocking_reentrancy(subject: &BlockingSubject) {
    let name = unique("reentrant");
    let [a, b, other] = subject.clients();
    let me = Owner::random();
    let outer = a.lock(&name).owner(&me).acquire().expect("outer");
    let inner = a.lock(&name).owner(&me).acquire().expect("inner");
    assert_eq!(inner.token(), outer.token());
    assert_eq!(outer.hold_count(), 2);
    let err = a
        .lock(&name)
        .owner(&me)
        .reentrant(false)
        .acquire()
        .expect_err("non-reentrant re-acquire");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    if a.capabilities().cross_process_reentrancy {
        let across = b
            .lock(&name)
            .owner(&me)
            .timeout(PATIENCE)
            .acquire()
            .expect("the same owner re-enters through another client");
        assert_eq!(across.token(), outer.token());
        across.release().expect("release across");
    } else {
        skip(
            subject,
            "blocking_reentrancy (across clients)",
            "no cross-process reentrancy",
        );
    }
    inner.release().expect("release inner");
    assert!(outer.is_held());
    assert!(
        other.try_acquire(&name).expect("probe").is_none(),
        "free after one of two holds"
    );
    outer.release().expect("release outer");
    assert!(
        other.try_acquire(&name).expect("probe").is_some(),
        "not free after the last hold"
    );
}

/// Dropping a guard releases the lock before `drop` returns: a thread
/// waiting for it gets it.
pub fn blocking_drop_releases_to_waiting_thread(subject: &BlockingSubject) {
    let name = unique("drop");
    let [a, b] = subject.clients();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .expect("acquire");
    let waiter = queue_waiter(&b, &name);
    drop(guard);
    let next =
        join_soon("the waiting thread gets the dropped lock", waiter).expect("waiter acquires");
    next.release().expect("release");
    // Synchronous: right after a drop, the lock is free for a try_acquire.
    let again = a.acquire(&name).expect("acquire");
    drop(again);
    assert!(
        b.try_acquire(&name).expect("probe").is_some(),
        "drop did not release at once"
    );
}

/// A guard dropped on an async runtime's thread, where it cannot block,
/// neither panics nor blocks, and still releases the lock promptly.
pub fn blocking_drop_inside_runtime(subject: &BlockingSubject) {
    let name = unique("drop-async");
    let [a, b] = subject.clients();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .expect("acquire");
    let waiter = queue_waiter(&b, &name);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let started = Instant::now();
    runtime.block_on(async move { drop(guard) });
    assert!(started.elapsed() < PATIENCE, "drop blocked the runtime");
    let next = join_soon("the lock dropped on a runtime thread frees", waiter).expect("waiter");
    next.release().expect("release");
    // The last handle of a client, dropped on a runtime thread, does not
    // panic either (its runtime cannot wait there for its threads).
    runtime.block_on(async move { drop(a) });
}

/// Inside an async runtime every blocking call refuses with WouldDeadlock
/// instead of stalling it.
pub fn blocking_refused_inside_runtime(subject: &BlockingSubject) {
    let name = unique("refused");
    let locks = subject.client();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let err = runtime
        .block_on(async { locks.acquire(&name) })
        .expect_err("blocking acquire inside a runtime");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    assert!(err.to_string().contains("async"), "unclear message: {err}");
    let err = runtime
        .block_on(async { locks.try_acquire(&name) })
        .expect_err("blocking try_acquire inside a runtime");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock);
    let err = runtime
        .block_on(async { blocking::connect("mem://") })
        .expect_err("blocking connect inside a runtime");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock);
    // Nothing was taken: the lock is free outside.
    assert!(locks.try_acquire(&name).expect("try_acquire").is_some());
}

/// After the lock is broken, the loss arrives on the channel and at the
/// callback, `is_held` turns false and the release is NotOwner.
pub fn blocking_lost_fires_channel_and_callback(subject: &BlockingSubject) {
    let [a, admin] = subject.clients();
    if !a.capabilities().break_lock {
        return skip(
            subject,
            "blocking_lost_fires_channel_and_callback",
            "cannot break locks",
        );
    }
    let name = unique("lost");
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("acquire");
    let lost = guard.lost_receiver();
    let (called_tx, called) = mpsc::channel();
    guard.on_lost(move |loss| {
        // The callback runs on a thread of its own, where blocking is allowed.
        let _ = called_tx.send((loss, thread::current().name().map(str::to_string)));
    });
    assert!(guard.is_held());
    assert!(lost.try_recv().is_err(), "lost before anything happened");
    assert!(admin.break_lock(&name).expect("break"));
    let loss = lost
        .recv_timeout(PATIENCE)
        .expect("the loss arrives on the channel");
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    let (loss, thread) = called.recv_timeout(PATIENCE).expect("the callback runs");
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    assert_eq!(thread.as_deref(), Some("omnilock-on-lost"));
    assert!(!guard.is_held());
    // A channel made after the loss gets it at once.
    let late = guard
        .lost_receiver()
        .recv_timeout(PATIENCE)
        .expect("a late receiver");
    assert_eq!(late.kind(), ErrorKind::LockLost);
    let err = guard.release().expect_err("releasing a lost lock");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
}

/// A clean release is not a loss: the channel disconnects without a value
/// and the callback is dropped without being called.
pub fn blocking_release_is_not_a_loss(subject: &BlockingSubject) {
    let name = unique("not-lost");
    let locks = subject.client();
    let guard = locks.acquire(&name).expect("acquire");
    let lost = guard.lost_receiver();
    let (called_tx, called) = mpsc::channel::<()>();
    guard.on_lost(move |_| {
        let _ = called_tx.send(());
    });
    guard.release().expect("release");
    match lost.recv_timeout(PATIENCE) {
        Err(mpsc::RecvTimeoutError::Disconnected) => {}
        other => panic!("the lost channel must close without a loss: {other:?}"),
    }
    assert_eq!(
        called.recv_timeout(PATIENCE),
        Err(mpsc::RecvTimeoutError::Disconnected),
        "the callback must be dropped uncalled"
    );
}

/// `with_lock` holds the lock for exactly the work, returns its value, and
/// returns the loss instead when the lock was lost during the work.
pub fn blocking_with_lock(subject: &BlockingSubject) {
    let name = unique("with");
    let [a, b] = subject.clients();
    let value = a
        .with_lock(&name, || {
            assert!(
                b.try_acquire(&name).expect("probe").is_none(),
                "not held during the work"
            );
            42
        })
        .expect("with_lock");
    assert_eq!(value, 42);
    assert!(
        b.try_acquire(&name).expect("probe").is_some(),
        "not released after the work"
    );
    if !a.capabilities().break_lock {
        return skip(
            subject,
            "blocking_with_lock (loss part)",
            "cannot break locks",
        );
    }
    // A short lease: a store that learns of the break only when renewing
    // (every third of the TTL) tells this process within it.
    let ttl = Duration::from_secs(1);
    let short = a.with_ttl(ttl).expect("ttl");
    let err = short
        .with_lock(&name, || {
            assert!(b.break_lock(&name).expect("break"));
            // Time passing is the point: by the end of the lease the loss
            // has been noticed whatever the store (synchronous work cannot
            // be told earlier).
            thread::sleep(ttl + Duration::from_secs(1));
            "unprotected"
        })
        .expect_err("work during which the lock was lost");
    assert_eq!(err.kind(), ErrorKind::LockLost, "{err}");
}

/// `close` returns promptly, a guard left over is dropped without hanging
/// or panicking, and another client gets the lock (at the latest when the
/// lease runs out).
pub fn blocking_close(subject: &BlockingSubject) {
    let name = unique("close");
    let [a, b] = subject.clients();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("acquire");
    let started = Instant::now();
    a.close().expect("close");
    drop(guard);
    drop(a);
    assert!(
        started.elapsed() < PATIENCE,
        "close and drop took {:?}",
        started.elapsed()
    );
    let next = b
        .lock(&name)
        .timeout(PATIENCE)
        .acquire()
        .expect("another client gets the lock after close");
    next.release().expect("release");
}

/// Invalid names are typed errors on every operation.
pub fn blocking_invalid_names(subject: &BlockingSubject) {
    let locks = subject.client();
    for bad in ["", "bad\nname", "nul\0"] {
        let err = locks.acquire(bad).expect_err("acquire");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
        let err = locks.try_acquire(bad).expect_err("try_acquire");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
        let err = locks.break_lock(bad).expect_err("break_lock");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
        let err = locks.with_lock(bad, || ()).expect_err("with_lock");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
    }
}

/// One leader at a time: a second candidate waits (and times out when told
/// to), takes over when the leader drops its leadership, with a higher
/// term, and after the last resignation nobody leads.
pub fn blocking_election(subject: &BlockingSubject) {
    let [a, b] = subject.clients();
    if !a.capabilities().election {
        return skip(subject, "blocking_election", "no elections");
    }
    let name = unique("election").replace('/', "-");
    let (ea, eb) = (
        a.election(&name).expect("election"),
        b.election(&name).expect("election"),
    );
    let first = ea.campaign("a").expect("the first candidate leads");
    assert!(first.is_leader());
    let leader = eb.leader().expect("leader").expect("someone leads");
    assert_eq!(leader.value, "a");
    assert_eq!(leader.term, first.term());
    let err = eb
        .candidate("late")
        .timeout(Duration::from_millis(200))
        .campaign()
        .expect_err("a second candidate must not lead at once");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");

    let (queued_tx, queued) = mpsc::channel();
    let next = {
        let eb = eb.clone();
        thread::spawn(move || {
            eb.candidate("b")
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .campaign()
        })
    };
    queued
        .recv_timeout(PATIENCE)
        .expect("the second candidate queues");
    let first_term = first.term();
    drop(first); // resigns before drop returns
    let second = join_soon("the next candidate takes over", next).expect("elected");
    assert!(second.term() > first_term, "term did not rise");
    assert_eq!(
        ea.leader().expect("leader").map(|l| l.value),
        Some("b".into())
    );
    second.resign().expect("resign");
    assert!(
        ea.leader().expect("leader").is_none(),
        "a leader after the last resignation"
    );
}
