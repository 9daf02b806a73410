//! The scenarios. Each takes any [`Subject`] whose store claims what the
//! scenario needs (listed with it in [`crate::registry`], which the runner
//! checks first) and asserts outcomes. Waits are bounded by generous timeouts (shared
//! machines stall now and then) and driven by events, not sleeps, except
//! where the passing of time is the point (leases).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{Capabilities, ErrorKind, LockGuard, Locks, Owner};
use tokio::sync::oneshot;

use crate::Subject;

mod names;
pub use names::{distinct_names_are_distinct_locks, namespaces_are_disjoint};

/// A bound for things that should happen "at once" or "soon": long enough
/// for a stalled store, short enough to catch a hang or a TTL-long delay.
const PATIENCE: Duration = Duration::from_secs(10);

fn unique(prefix: &str) -> String {
    format!("conformance/{prefix}/{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: did not happen within {PATIENCE:?}"),
    }
}

async fn clients(subject: &Subject, n: usize) -> Vec<Locks> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(subject.client().await);
    }
    all
}

async fn caps(subject: &Subject) -> Capabilities {
    subject.client().await.capabilities()
}

/// try-acquires `name` until it succeeds: for a lock that is free but may
/// still have a cancelled waiter's entry, which goes in the background.
async fn once_free(locks: &Locks, name: &str) -> LockGuard {
    loop {
        if let Some(guard) = locks.try_acquire(name).await.expect("try_acquire") {
            return guard;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Queues an acquire of `name` on `locks` in a task and returns once the
/// backend reports it waiting. The task sends its guard (or error) on `done`.
async fn queue_waiter(
    locks: &Locks,
    name: &str,
    ttl: Duration,
) -> tokio::task::JoinHandle<omnilock_core::Result<LockGuard>> {
    let (queued_tx, queued_rx) = oneshot::channel();
    let locks = locks.clone();
    let name = name.to_string();
    let task = tokio::spawn(async move {
        locks
            .lock(&name)
            .ttl(ttl)
            .on_wait(move || {
                let _ = queued_tx.send(());
            })
            .acquire()
            .await
    });
    within("a waiter reports that it waits", queued_rx)
        .await
        .expect("the waiter reports waiting before it ends");
    task
}

/// 32 tasks over 4 clients each increment a shared non-atomic counter 20
/// times under the lock: the result is exactly 640 and no two tasks are ever
/// inside at once.
pub async fn mutual_exclusion(subject: &Subject) {
    let name = unique("exclusion");
    let clients = clients(subject, 4).await;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let locks = clients[i % clients.len()].clone();
        let (name, counter, inside) = (name.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = locks
                    .lock(&name)
                    .timeout(Duration::from_secs(120))
                    .acquire()
                    .await
                    .expect("acquire");
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                // Read, yield, write: any overlap loses an increment.
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker task");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 640);
}

/// try-acquire on a held lock returns "not acquired" at once; a waiting
/// acquire with a 200 ms timeout fails with Timeout; the holder keeps it.
pub async fn try_acquire_and_timeout(subject: &Subject) {
    let name = unique("try");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let held = a.acquire(&name).await.expect("first acquire");
    let busy = within("try_acquire on a held lock", b.try_acquire(&name))
        .await
        .expect("try_acquire");
    assert!(busy.is_none(), "try_acquire took a held lock");

    let started = Instant::now();
    let err = b
        .lock(&name)
        .timeout(Duration::from_millis(200))
        .acquire()
        .await
        .expect_err("acquire of a held lock must time out");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(
        started.elapsed() < PATIENCE,
        "timeout took {:?}",
        started.elapsed()
    );
    assert!(held.is_held());
    held.release().await.expect("release");
    // The timed-out acquire's queue entry goes in the background (a dropped
    // acquire cannot wait for it): on a fair store it may keep the freed
    // lock from try_acquire for a moment, never for long.
    let taken = within("try_acquire of a free lock", once_free(&b, &name)).await;
    taken.release().await.expect("release");
}

/// A waiter that is dropped (cancelled) leaves nothing behind: the waiter
/// behind it gets the lock as soon as the holder releases, and afterwards the
/// lock is free for anyone.
pub async fn cancelled_acquire_leaves_nothing(subject: &Subject) {
    let name = unique("cancel");
    let [a, b, c] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let ttl = Duration::from_secs(60);
    let held = a.lock(&name).ttl(ttl).acquire().await.expect("holder");
    let doomed = queue_waiter(&b, &name, ttl).await;
    let next = queue_waiter(&c, &name, ttl).await;
    doomed.abort();
    assert!(doomed.await.unwrap_err().is_cancelled());
    // Also a timed-out acquire is a cancelled one.
    let err = b
        .lock(&name)
        .ttl(ttl)
        .timeout(Duration::from_millis(100))
        .acquire()
        .await
        .expect_err("times out");
    assert_eq!(err.kind(), ErrorKind::Timeout);

    held.release().await.expect("release");
    // Well under the 60 s lease a leftover entry would hold things up for.
    let guard = within("the next waiter gets the lock", next)
        .await
        .expect("task")
        .expect("next waiter acquires");
    guard.release().await.expect("release");
    // A cancelled waiter's entry is removed in the background: give it a
    // moment (the store may stall), far less than the 60 s a leftover
    // entry would block the lock for.
    let free = within("the lock is free once everyone left", once_free(&a, &name)).await;
    free.release().await.expect("release");
}

/// An owner re-enters a lock it holds, to depth 3, with the same token; the
/// lock frees only after as many releases; other owners are kept out meanwhile.
pub async fn reentrancy(subject: &Subject) {
    let name = unique("reentrant");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let me = Owner::random();
    let first = a.lock(&name).owner(&me).acquire().await.expect("depth 1");
    let second = within("re-enter", a.lock(&name).owner(&me).acquire())
        .await
        .expect("depth 2");
    let third = within("re-enter", a.lock(&name).owner(&me).try_acquire())
        .await
        .expect("depth 3")
        .expect("try_acquire re-enters");
    assert_eq!(first.token(), second.token());
    assert_eq!(first.token(), third.token());
    assert_eq!(first.hold_count(), 3);
    for guard in [third, first] {
        guard.release().await.expect("release");
        assert!(b.try_acquire(&name).await.expect("probe").is_none());
    }
    assert!(second.is_held());
    second.release().await.expect("last release");
    let other = within("another owner after the last release", b.acquire(&name))
        .await
        .expect("another owner acquires");
    assert_ne!(other.token(), 0);
}

/// Where the store keeps the hold count (`cross_process_reentrancy`), the
/// same owner re-enters through another client (another connection, as in
/// another process) with the same token; the lock frees only after both
/// release; a non-reentrant re-acquire there is `WouldDeadlock`.
pub async fn reentrancy_across_clients(subject: &Subject) {
    let [a, b, other] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let name = unique("reentrant-across");
    let me = Owner::random();
    let first = a
        .lock(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("first hold");
    let second = within(
        "re-entry through another client",
        b.lock(&name).owner(&me).acquire(),
    )
    .await
    .expect("second hold");
    assert_eq!(first.token(), second.token());
    let err = b
        .lock(&name)
        .owner(&me)
        .reentrant(false)
        .try_acquire()
        .await
        .expect_err("non-reentrant re-acquire");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    first.release().await.expect("release one hold");
    assert!(
        other.try_acquire(&name).await.expect("probe").is_none(),
        "freed while the other client still holds"
    );
    second.release().await.expect("release the last hold");
    let taken = within(
        "another owner after both releases",
        other.try_acquire(&name),
    )
    .await
    .expect("probe");
    assert!(taken.is_some(), "still held after both releases");
}

/// A non-reentrant re-acquire by the holder is an error at once, not a deadlock.
pub async fn non_reentrant_reacquire_fails(subject: &Subject) {
    let name = unique("nonreentrant");
    let locks = subject.client().await;
    let me = Owner::random();
    let held = locks
        .lock(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("acquire");
    for wait in [true, false] {
        let request = locks.lock(&name).owner(&me).reentrant(false);
        let err = within("a non-reentrant re-acquire fails", async {
            if wait {
                request.acquire().await.map(|_| ())
            } else {
                request.try_acquire().await.map(|_| ())
            }
        })
        .await
        .expect_err("non-reentrant re-acquire must fail");
        assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    }
    assert_eq!(held.hold_count(), 1);
    held.release().await.expect("release");
}

/// Fair backends grant 10 queued waiters in the order they queued.
pub async fn fifo_order(subject: &Subject) {
    let name = unique("fifo");
    let clients = clients(subject, 3).await;
    let held = clients[0].acquire(&name).await.expect("holder");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..10 {
        let locks = clients[i % clients.len()].clone();
        let task = queue_waiter(&locks, &name, Duration::from_secs(30)).await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = task.await.expect("task").expect("waiter acquires");
            order.lock().unwrap().push(i);
            guard.release().await.expect("release");
        }));
    }
    held.release().await.expect("release");
    for waiter in waiters {
        within("every waiter is served", waiter)
            .await
            .expect("waiter");
    }
    assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
}

/// A holder that vanishes without releasing (its runtime is gone, as if the
/// process died) stops renewing; another client gets the lock within TTL + 1 s.
pub async fn abandoned_holder_expires(subject: &Subject) {
    let name = unique("abandoned");
    let ttl = Duration::from_secs(2);
    let thief = subject.client().await;
    let victim = subject.clone();
    let victim_name = name.clone();
    // Acquire on a separate runtime, leak the guard, then drop that runtime:
    // its renewal task and its connections die with it, like a killed process.
    let acquired_at = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let at = runtime.block_on(async {
            let locks = victim.client().await;
            let guard = locks
                .lock(&victim_name)
                .ttl(ttl)
                .acquire()
                .await
                .expect("victim");
            let at = Instant::now();
            std::mem::forget(guard);
            at
        });
        drop(runtime);
        at
    })
    .join()
    .expect("victim thread");
    let guard = thief
        .lock(&name)
        .timeout(ttl + PATIENCE)
        .acquire()
        .await
        .expect("the abandoned lock frees");
    let waited = acquired_at.elapsed();
    assert!(
        waited <= ttl + Duration::from_secs(1),
        "the lock freed {waited:?} after the holder vanished (TTL {ttl:?})"
    );
    guard.release().await.expect("release");
}

/// Renewal keeps a lock held across 3 × TTL.
pub async fn renewal_keeps_lock(subject: &Subject) {
    let name = unique("renewal");
    let ttl = Duration::from_secs(1);
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let first_deadline = guard.safe_until();
    let lost = guard.lost();
    tokio::pin!(lost);
    let end = Instant::now() + 3 * ttl + ttl / 2;
    while Instant::now() < end {
        tokio::select! {
            loss = &mut lost => panic!("lock lost while renewing: {loss}"),
            _ = tokio::time::sleep(ttl / 2) => {}
        }
        assert!(guard.is_held(), "guard reports the lock not held");
        let stolen = b.lock(&name).ttl(ttl).try_acquire().await.expect("probe");
        assert!(stolen.is_none(), "another owner took a renewed lock");
    }
    assert!(
        guard.safe_until() > first_deadline,
        "safe deadline never moved"
    );
    guard.release().await.expect("release");
}

/// The lost signal fires when the lock is taken away under its holder, and
/// its error names the backend and the lock.
pub async fn lost_signal_fires(subject: &Subject) {
    let name = unique("lost");
    let [a, admin] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    assert!(guard.is_held());
    assert!(admin.break_lock(&name).await.expect("break"));
    let loss = within("the lost signal fires", guard.lost()).await;
    assert_eq!(loss.kind(), ErrorKind::LockLost);
    assert_eq!(loss.backend(), Some(a.backend_kind()), "{loss}");
    assert_eq!(loss.lock(), Some(name.as_str()), "{loss}");
    assert!(!guard.is_held());
    let err = guard.release().await.expect_err("releasing a lost lock");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
}

/// A clean release is not a loss: a task watching the lost signal must not
/// wake when its holder releases (a false alarm there makes applications
/// abandon work or page someone).
pub async fn release_is_not_a_loss(subject: &Subject) {
    let name = unique("release-not-lost");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a.acquire(&name).await.expect("acquire");
    let watcher = tokio::spawn(guard.lost());
    guard.release().await.expect("release");
    // The store has surely finished with the first hold once another client
    // got the lock after it.
    let next = within("another client acquires", b.acquire(&name)).await;
    next.expect("acquire after release")
        .release()
        .await
        .expect("release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !watcher.is_finished(),
        "the lost signal fired after a clean release: {:?}",
        watcher.await
    );
    watcher.abort();
}

/// A stale guard's release returns NotOwner and leaves the new holder's lock alone.
pub async fn stale_release_is_not_owner(subject: &Subject) {
    let name = unique("stale");
    let [a, b, c] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let stale = a.acquire(&name).await.expect("first holder");
    assert!(c.break_lock(&name).await.expect("break"));
    let fresh = within("a new holder takes the broken lock", b.acquire(&name))
        .await
        .expect("second holder");
    if caps(subject).await.fencing {
        assert!(fresh.token() > stale.token(), "token did not advance");
    }
    let err = stale.release().await.expect_err("stale release");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    assert!(fresh.is_held());
    let probe = c.try_acquire(&name).await.expect("probe");
    assert!(
        probe.is_none(),
        "the stale release freed the new holder's lock"
    );
    fresh.release().await.expect("new holder releases");
}

/// Fencing tokens strictly increase over 100 acquisitions by rotating owners
/// and clients.
pub async fn fencing_tokens_increase(subject: &Subject) {
    let name = unique("fencing");
    let clients = clients(subject, 3).await;
    let mut last = 0u64;
    for i in 0..100 {
        let guard = clients[i % clients.len()]
            .acquire(&name)
            .await
            .expect("acquire");
        assert!(guard.token() > last, "token {} after {last}", guard.token());
        last = guard.token();
        if i % 2 == 0 {
            guard.release().await.expect("release");
        } else {
            // Release on drop must free the lock just as well.
            drop(guard);
        }
    }
}

/// Invalid names are typed errors on every operation, before any I/O.
pub async fn invalid_names_rejected(subject: &Subject) {
    let locks = subject.client().await;
    let long = "n".repeat(257);
    for bad in ["", long.as_str(), "bad\nname", "nul\0", "tab\t"] {
        let err = locks.acquire(bad).await.expect_err("acquire");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
        let err = locks.try_acquire(bad).await.expect_err("try_acquire");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
        let err = locks.break_lock(bad).await.expect_err("break_lock");
        assert!(
            matches!(err.kind(), ErrorKind::InvalidName),
            "{bad:?}: {err}"
        );
    }
    // Names that look like paths, patterns or SQL are just names, and distinct.
    let tricky = [
        "../../escape",
        "a/b",
        "a*",
        "'; DROP TABLE locks; --",
        "{tag}x",
        "ключ 🔒",
        &"x".repeat(256),
    ];
    let mut guards = Vec::new();
    for name in tricky {
        let guard = locks.try_acquire(name).await.expect("valid name");
        guards.push(guard.unwrap_or_else(|| panic!("{name:?} was busy")));
    }
    let other = subject.client().await;
    assert!(other.try_acquire("a").await.expect("a").is_some());
    assert!(other.try_acquire("a/").await.expect("a/").is_some());
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// One process holds 1,000 distinct locks at once.
pub async fn many_locks_at_once(subject: &Subject) {
    let prefix = unique("many");
    let locks = subject.client().await;
    let mut guards = Vec::with_capacity(1000);
    for i in 0..1000 {
        let guard = locks
            .try_acquire(&format!("{prefix}/{i}"))
            .await
            .expect("try_acquire");
        guards.push(guard.expect("a fresh name is free"));
    }
    assert!(guards.iter().all(|g| g.is_held()));
    let other = subject.client().await;
    assert!(other
        .try_acquire(&format!("{prefix}/500"))
        .await
        .expect("probe")
        .is_none());
    for guard in guards {
        guard.release().await.expect("release");
    }
    assert!(other
        .try_acquire(&format!("{prefix}/999"))
        .await
        .expect("probe")
        .is_some());
}

/// Dropping a guard releases the lock in the background, promptly.
pub async fn drop_releases_in_background(subject: &Subject) {
    let name = unique("drop");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let waiter = queue_waiter(&b, &name, Duration::from_secs(60)).await;
    drop(guard);
    let next = within("drop releases", waiter)
        .await
        .expect("task")
        .expect("waiter acquires");
    next.release().await.expect("release");
}

/// A guard dropped on a thread with no runtime does not panic and still
/// releases the lock.
pub async fn drop_outside_runtime(subject: &Subject) {
    let name = unique("noruntime");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let waiter = queue_waiter(&b, &name, Duration::from_secs(60)).await;
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("dropping a guard off-runtime must not panic");
    let next = within("off-runtime drop releases", waiter)
        .await
        .expect("task")
        .expect("waiter acquires");
    next.release().await.expect("release");
}

/// Errors carry the backend, the operation and the lock name.
pub async fn errors_name_backend_and_lock(subject: &Subject) {
    let locks = subject.client().await;
    let name = unique("errors");
    let held = locks.acquire(&name).await.expect("acquire");
    let err = locks
        .lock(&name)
        .timeout(Duration::from_millis(50))
        .acquire()
        .await
        .expect_err("timeout");
    assert_eq!(err.backend(), Some(locks.backend_kind()));
    assert_eq!(err.lock(), Some(name.as_str()));
    assert_eq!(err.operation(), Some(omnilock_core::Operation::Acquire));
    let err = locks
        .lock(&name)
        .ttl(Duration::from_millis(1))
        .acquire()
        .await
        .expect_err("TTL too short");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    held.release().await.expect("release");
}

/// No herd: a release wakes one waiter, so the store requests a hand-off
/// costs do not grow with the number of waiters. Measured on a chain of
/// hand-offs (each waiter releases as soon as it is granted) with 2 and with
/// 32 waiters, from the store's own request counters. Needs push wake-ups
/// and a request counter (`Measure::requests_served`); runs alone (see
/// [`crate::herd_main!`]).
pub async fn handoff_cost_is_flat(subject: &Subject) {
    let counter = subject.client().await;
    let few = handoff_cost(subject, &counter, 2).await;
    let many = handoff_cost(subject, &counter, 32).await;
    eprintln!(
        "{}: store requests per hand-off: {few:.2} with 2 waiters, {many:.2} with 32",
        subject.label()
    );
    assert!(
        many <= few * 1.5 + 1.0,
        "a hand-off costs {many:.2} requests with 32 waiters but {few:.2} with 2: \
         releases wake more than one waiter"
    );
}

/// Requests per hand-off along a chain of `waiters` queued acquisitions.
async fn handoff_cost(subject: &Subject, counter: &Locks, waiters: usize) -> f64 {
    let name = unique("herd");
    let clients = clients(subject, 4).await;
    let ttl = Duration::from_secs(60);
    let holder = clients[0]
        .lock(&name)
        .ttl(ttl)
        .acquire()
        .await
        .expect("holder");
    let mut chain = Vec::new();
    for i in 0..waiters {
        let (queued_tx, queued_rx) = oneshot::channel();
        let locks = clients[i % clients.len()].clone();
        let name = name.clone();
        chain.push(tokio::spawn(async move {
            let guard = locks
                .lock(&name)
                .ttl(ttl)
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .acquire()
                .await
                .expect("waiter");
            guard.release().await.expect("release");
        }));
        within("a waiter reports that it waits", queued_rx)
            .await
            .expect("queued");
    }
    // Waiters finish setting up (watches, subscriptions) after they report
    // waiting: start counting once the store is quiet.
    let start = quiet_count(counter).await;
    holder.release().await.expect("release");
    for task in chain {
        within("the chain of hand-offs", task)
            .await
            .expect("waiter task");
    }
    let end = served(counter).await.expect("counter");
    (end - start) as f64 / waiters as f64
}

/// The store's request count through the backend's benchmark hook, if it
/// has one.
async fn served(locks: &Locks) -> Option<u64> {
    match locks.measure()?.requests_served().await {
        Ok(count) => Some(count),
        Err(err) if err.kind() == ErrorKind::Unsupported => None,
        Err(err) => panic!("request counter: {err}"),
    }
}

/// The request count once two reads 100 ms apart agree.
async fn quiet_count(counter: &Locks) -> u64 {
    let mut last = served(counter).await.expect("counter");
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = served(counter).await.expect("counter");
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// The `holder` and `election` flags against the calls they name: claimed,
/// the call answers; not claimed, it answers `Unsupported` (never a wrong
/// answer, never a different error).
pub async fn capabilities_tell_the_truth(subject: &Subject) {
    let locks = subject.client().await;
    let caps = locks.capabilities();
    let label = subject.label();
    match locks.holder(&unique("caps")).await {
        Ok(None) => assert!(caps.holder, "{label}: holder() answers, yet holder=false"),
        Ok(Some(h)) => panic!("{label}: a lock never taken has a holder: {h:?}"),
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            assert!(
                !caps.holder,
                "{label}: holder=true, yet holder() is unsupported"
            )
        }
        Err(e) => panic!("{label}: holder(): {e}"),
    }
    let election = locks.election(&unique("caps")).expect("an election handle");
    match election.leader().await {
        Ok(None) => assert!(caps.election, "{label}: elections work, yet election=false"),
        Ok(Some(_)) => panic!("{label}: an election never held has a leader"),
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            assert!(
                !caps.election,
                "{label}: election=true, yet leader() is unsupported"
            )
        }
        Err(e) => panic!("{label}: leader(): {e}"),
    }
}

/// Queues a campaign for `value` and returns once it waits in line.
async fn queue_candidate(
    locks: &Locks,
    election: &str,
    value: &str,
) -> tokio::task::JoinHandle<omnilock_core::Result<omnilock_core::Leadership>> {
    let (queued_tx, queued_rx) = oneshot::channel();
    let election = locks.election(election).expect("election");
    let value = value.to_string();
    let task = tokio::spawn(async move {
        election
            .candidate(&value)
            .ttl(Duration::from_secs(60))
            .on_wait(move || {
                let _ = queued_tx.send(());
            })
            .campaign()
            .await
    });
    within("a candidate reports that it waits", queued_rx)
        .await
        .expect("the candidate reports waiting");
    task
}

/// One leader at a time; candidates lead in the order they queued; each new
/// leader has a higher term; everyone reads the same leader.
pub async fn election_one_leader_at_a_time(subject: &Subject) {
    let name = unique("election");
    let [a, b, c, reader] = <[Locks; 4]>::try_from(clients(subject, 4).await).unwrap();
    let watch = reader.election(&name).expect("election");
    assert_eq!(watch.leader().await.expect("leader"), None);
    let first = a
        .election(&name)
        .unwrap()
        .campaign("10.0.0.1:80")
        .await
        .expect("first leader");
    let second = queue_candidate(&b, &name, "10.0.0.2:80").await;
    let third = queue_candidate(&c, &name, "10.0.0.3:80").await;
    let now = watch.leader().await.expect("leader").expect("a leader");
    assert_eq!(
        (now.value.as_str(), now.term),
        ("10.0.0.1:80", first.term())
    );
    assert!(!second.is_finished() && !third.is_finished(), "two leaders");
    let term = first.term();
    first.resign().await.expect("resign");
    let second = within("the next in line leads", second)
        .await
        .expect("task")
        .expect("second leader");
    assert_eq!(second.value(), "10.0.0.2:80");
    assert!(second.term() > term, "terms rise");
    let now = watch.leader().await.expect("leader").expect("a leader");
    assert_eq!(now.value, "10.0.0.2:80");
    assert!(!third.is_finished(), "two leaders");
    second.resign().await.expect("resign");
    let third = within("the last in line leads", third)
        .await
        .expect("task")
        .expect("third leader");
    assert_eq!(
        watch.leader().await.expect("leader").map(|l| l.value),
        Some("10.0.0.3:80".to_string())
    );
    third.resign().await.expect("resign");
    assert_eq!(watch.leader().await.expect("leader"), None);
}

/// A leader that dies (its runtime gone, as if the process died) is replaced
/// by the next candidate within TTL + 1 s.
pub async fn election_successor_takes_over_when_leader_dies(subject: &Subject) {
    let name = unique("election-death");
    let ttl = Duration::from_secs(2);
    let victim = subject.clone();
    let victim_name = name.clone();
    let (won_tx, won_rx) = std::sync::mpsc::channel();
    let (die_tx, die_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let locks = victim.client().await;
            let leadership = locks
                .election(&victim_name)
                .unwrap()
                .candidate("doomed")
                .ttl(ttl)
                .campaign()
                .await
                .expect("first leader");
            won_tx.send(()).unwrap();
            std::mem::forget(leadership);
        });
        let _ = die_rx.recv();
        drop(runtime);
    });
    won_rx.recv().expect("the first leader wins");
    let successor_client = subject.client().await;
    let successor = queue_candidate(&successor_client, &name, "heir").await;
    die_tx.send(()).unwrap();
    thread.join().expect("leader thread");
    let died_at = Instant::now();
    let heir = tokio::time::timeout(ttl + PATIENCE, successor)
        .await
        .expect("the successor leads")
        .expect("task")
        .expect("campaign");
    let waited = died_at.elapsed();
    assert!(
        waited <= ttl + Duration::from_secs(1),
        "the successor led {waited:?} after the leader died (TTL {ttl:?})"
    );
    let reader = subject.client().await;
    let now = reader
        .election(&name)
        .unwrap()
        .leader()
        .await
        .expect("leader");
    assert_eq!(now.map(|l| l.value), Some("heir".to_string()));
    heir.resign().await.expect("resign");
}

/// An observer sees every leader, in order, and then that nobody leads.
pub async fn election_observers_see_every_change(subject: &Subject) {
    let name = unique("election-observe");
    let clients = clients(subject, 3).await;
    let mut observer = clients[0]
        .election(&name)
        .unwrap()
        .with_poll_interval(Duration::from_millis(20))
        .observe();
    assert_eq!(
        within("the first observation", observer.changed())
            .await
            .expect("observe"),
        None
    );
    let values = ["n1", "n2", "n3", "n4"];
    let mut seen = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let leadership = clients[1 + i % 2]
            .election(&name)
            .unwrap()
            .campaign(value)
            .await
            .expect("campaign");
        // Resign only once the observer has seen this leader (it may first
        // see the gap between two leaders).
        loop {
            match within("the observer sees the new leader", observer.changed())
                .await
                .expect("observe")
            {
                Some(leader) => {
                    assert_eq!(leader.term, leadership.term());
                    seen.push(leader);
                    break;
                }
                None => continue,
            }
        }
        leadership.resign().await.expect("resign");
    }
    let observed: Vec<_> = seen.iter().map(|l| l.value.as_str()).collect();
    assert_eq!(observed, values);
    assert!(
        seen.windows(2).all(|w| w[0].term < w[1].term),
        "terms rise: {seen:?}"
    );
    assert_eq!(
        within("the observer sees nobody leads", observer.changed())
            .await
            .expect("observe"),
        None
    );
}

/// The benchmark hooks, where a backend has them, work: a floor round runs
/// and leaves the lock space as it was, and the request counter (if any)
/// counts it.
pub async fn measure_hooks_work(subject: &Subject) {
    let locks = subject.client().await;
    let measure = locks.measure().expect("benchmark hooks (claimed)");
    assert!(!measure.floor_ops().is_empty());
    let before = match measure.requests_served().await {
        Ok(count) => Some(count),
        Err(err) if err.kind() == ErrorKind::Unsupported => None,
        Err(err) => panic!("request counter: {err}"),
    };
    for _ in 0..3 {
        within("a floor round", measure.floor_round())
            .await
            .expect("floor round");
    }
    if let Some(before) = before {
        let after = measure.requests_served().await.expect("request counter");
        assert!(
            after >= before + 3,
            "3 floor rounds counted as {} requests",
            after - before
        );
    }
}
