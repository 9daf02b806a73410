//! The blocking scenarios of one lock: exclusion, timeouts, ownership,
//! tokens, reentrancy, drops, the runtime refusal, losses and `with_lock`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use omnilock::blocking::{self, LockGuard, Locks};
use omnilock_core::{ErrorKind, Operation, Owner, Result};

use super::{
    BlockingSubject, PATIENCE, assert_free, assert_still_held, assert_taken, join_soon,
    queue_waiter, unique,
};
use crate::registry::{Claim, Scenario, blocking_scenario};
use crate::scenarios::assert_timed_out;

/// The blocking scenarios of this module, with what each needs the store to claim: one lock at a time: exclusion, timeouts, ownership, reentrancy, drop, loss and close.
pub(crate) static SCENARIOS: &[Scenario<BlockingSubject>] = &[
    blocking_scenario!(blocking_mutual_exclusion),
    blocking_scenario!(blocking_try_acquire_when_held),
    blocking_scenario!(blocking_timeout_is_typed),
    blocking_scenario!(blocking_release_by_owner_only),
    blocking_scenario!(blocking_stale_release_is_not_owner, Claim::BreakLock),
    blocking_scenario!(blocking_tokens_rise, Claim::FencingTokens),
    blocking_scenario!(blocking_reentrancy),
    blocking_scenario!(
        blocking_reentrancy_across_clients,
        Claim::CrossProcessReentrancy
    ),
    blocking_scenario!(blocking_drop_releases_to_waiting_thread),
    blocking_scenario!(blocking_drop_inside_runtime),
    blocking_scenario!(blocking_refused_inside_runtime),
    blocking_scenario!(blocking_lost_fires_channel_and_callback, Claim::BreakLock),
    blocking_scenario!(blocking_release_is_not_a_loss),
    blocking_scenario!(blocking_with_lock),
    blocking_scenario!(blocking_with_lock_returns_the_loss, Claim::BreakLock),
    blocking_scenario!(blocking_close),
    blocking_scenario!(blocking_invalid_names),
];

/// 8 threads over 2 clients each increment a shared non-atomic counter 20
/// times under the lock: exactly 160, and never two threads inside at once.
pub(crate) fn blocking_mutual_exclusion(subject: &BlockingSubject) {
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
pub(crate) fn blocking_try_acquire_when_held(subject: &BlockingSubject) {
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
pub(crate) fn blocking_timeout_is_typed(subject: &BlockingSubject) {
    let name = unique("timeout");
    let [a, b] = subject.clients();
    let held = a.acquire(&name).expect("acquire");
    let started = Instant::now();
    let timeout = Duration::from_millis(200);
    let err = b
        .lock(&name)
        .timeout(timeout)
        .acquire()
        .expect_err("acquire of a held lock must time out");
    assert_timed_out(&err, started.elapsed(), timeout);
    assert_eq!(err.operation(), Some(Operation::Acquire));
    assert_eq!(err.lock(), Some(name.as_str()));
    assert_eq!(err.backend(), Some(b.backend_kind()));
    assert!(held.is_held());
    held.release().expect("release");
}

/// Only the owner's guard releases the lock: another client cannot take it
/// while held, and the owner's release frees it.
pub(crate) fn blocking_release_by_owner_only(subject: &BlockingSubject) {
    let name = unique("owner");
    let [a, b] = subject.clients();
    let first = a.acquire(&name).expect("first holder");
    assert_taken(&b, &name, "still held");
    first.release().expect("owner releases");
    assert_free(&b, &name, "not freed");
}

/// A stale guard (its lock broken and taken by another) gets NotOwner and
/// leaves the new holder alone.
pub(crate) fn blocking_stale_release_is_not_owner(subject: &BlockingSubject) {
    let name = unique("stale");
    let [a, b, admin] = subject.clients();
    let stale = a.acquire(&name).expect("holder");
    assert!(admin.break_lock(&name).expect("break"));
    let fresh = b
        .lock(&name)
        .timeout(PATIENCE)
        .acquire()
        .expect("a new holder takes the broken lock");
    let err = stale.release().expect_err("a stale guard must not release");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    assert_still_held(
        &fresh,
        &admin,
        &name,
        "the stale release freed the new holder's lock",
    );
    fresh.release().expect("the new holder releases");
}

/// Fencing tokens strictly increase over grants by alternating clients,
/// whether the previous guard was released or dropped.
pub(crate) fn blocking_tokens_rise(subject: &BlockingSubject) {
    let clients: [Locks; 2] = subject.clients();
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
/// with WouldDeadlock.
pub(crate) fn blocking_reentrancy(subject: &BlockingSubject) {
    let name = unique("reentrant");
    let [a, other] = subject.clients();
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
    inner.release().expect("release inner");
    assert_still_held(&outer, &other, &name, "free after one of two holds");
    outer.release().expect("release outer");
    assert_free(&other, &name, "not free after the last hold");
}

/// The same owner re-enters its lock through another client (same token),
/// where the store claims cross-process reentrancy.
pub(crate) fn blocking_reentrancy_across_clients(subject: &BlockingSubject) {
    let name = unique("reentrant-across");
    let [a, b, other] = subject.clients();
    let me = Owner::random();
    let outer = a.lock(&name).owner(&me).acquire().expect("outer");
    let across = b
        .lock(&name)
        .owner(&me)
        .timeout(PATIENCE)
        .acquire()
        .expect("the same owner re-enters through another client");
    assert_eq!(across.token(), outer.token());
    across.release().expect("release across");
    assert_still_held(&outer, &other, &name, "free after one of two holds");
    outer.release().expect("release outer");
}

/// `holder` takes `name` on a 60 s lease and a thread on `waiter` queues
/// for it: whatever frees the lock sooner than the lease shows in the
/// waiting thread.
fn held_with_waiter(
    holder: &Locks,
    waiter: &Locks,
    name: &str,
) -> (LockGuard, thread::JoinHandle<Result<LockGuard>>) {
    let held = holder.lock(name).ttl(Duration::from_secs(60)).acquire();
    (held.expect("acquire"), queue_waiter(waiter, name))
}

/// Dropping a guard releases the lock before `drop` returns: a thread
/// waiting for it gets it.
pub(crate) fn blocking_drop_releases_to_waiting_thread(subject: &BlockingSubject) {
    let name = unique("drop");
    let [a, b] = subject.clients();
    let (guard, waiter) = held_with_waiter(&a, &b, &name);
    drop(guard);
    let next =
        join_soon("the waiting thread gets the dropped lock", waiter).expect("waiter acquires");
    next.release().expect("release");
    // Synchronous: right after a drop, the lock is free for a try_acquire.
    let again = a.acquire(&name).expect("acquire");
    drop(again);
    assert_free(&b, &name, "drop did not release at once");
}

/// A guard dropped on an async runtime's thread, where it cannot block,
/// neither panics nor blocks, and still releases the lock promptly.
pub(crate) fn blocking_drop_inside_runtime(subject: &BlockingSubject) {
    let name = unique("drop-async");
    let [a, b] = subject.clients();
    let (guard, waiter) = held_with_waiter(&a, &b, &name);
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
pub(crate) fn blocking_refused_inside_runtime(subject: &BlockingSubject) {
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
pub(crate) fn blocking_lost_fires_channel_and_callback(subject: &BlockingSubject) {
    let [a, admin] = subject.clients();
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
pub(crate) fn blocking_release_is_not_a_loss(subject: &BlockingSubject) {
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

/// `with_lock` holds the lock for exactly the work and returns its value.
pub(crate) fn blocking_with_lock(subject: &BlockingSubject) {
    let name = unique("with");
    let [a, b] = subject.clients();
    let value = a
        .with_lock(&name, || {
            assert_taken(&b, &name, "not held during the work");
            42
        })
        .expect("with_lock");
    assert_eq!(value, 42);
    assert_free(&b, &name, "not released after the work");
}

/// `with_lock` returns the loss instead of the work's value when the lock
/// was lost during the work.
pub(crate) fn blocking_with_lock_returns_the_loss(subject: &BlockingSubject) {
    let name = unique("with-lost");
    let [a, b] = subject.clients();
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
pub(crate) fn blocking_close(subject: &BlockingSubject) {
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
pub(crate) fn blocking_invalid_names(subject: &BlockingSubject) {
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
