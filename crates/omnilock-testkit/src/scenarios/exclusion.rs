//! Exclusion and waiting: one holder at a time, try-acquire and timeouts,
//! cancelled waiters, FIFO order, many locks at once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnilock_core::{ErrorKind, Locks};

use super::{clients, once_free, queue_waiter, times_out, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: mutual exclusion, timeouts, cancellation, FIFO order and many locks.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(mutual_exclusion),
    scenario!(try_acquire_and_timeout),
    scenario!(cancelled_acquire_leaves_nothing),
    scenario!(fifo_order, Claim::Fair),
    scenario!(newcomers_never_pass_a_waiter, Claim::Fair),
    scenario!(many_locks_at_once),
];

/// 32 tasks over 4 clients each increment a shared non-atomic counter 20
/// times under the lock (5 times on a connection variant): the result is
/// exactly 32 × the rounds and no two tasks are ever inside at once.
pub(crate) async fn mutual_exclusion(subject: &Subject) {
    let name = unique("exclusion");
    let clients = clients(subject, 4).await;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let rounds = subject.rounds(20);
    let mut tasks = Vec::new();
    for i in 0..32 {
        let locks = clients[i % clients.len()].clone();
        let (name, counter, inside) = (name.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
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
    assert_eq!(counter.load(Ordering::SeqCst), 32 * rounds as u64);
}

/// try-acquire on a held lock returns "not acquired" at once; a waiting
/// acquire with a 200 ms timeout fails with Timeout; the holder keeps it.
pub(crate) async fn try_acquire_and_timeout(subject: &Subject) {
    let name = unique("try");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let held = a.acquire(&name).await.expect("first acquire");
    let busy = within("try_acquire on a held lock", b.try_acquire(&name))
        .await
        .expect("try_acquire");
    assert!(busy.is_none(), "try_acquire took a held lock");

    times_out(b.lock(&name), Duration::from_millis(200)).await;
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
pub(crate) async fn cancelled_acquire_leaves_nothing(subject: &Subject) {
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

/// Fair backends grant 10 queued waiters in the order they queued.
pub(crate) async fn fifo_order(subject: &Subject) {
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

/// A fair lock released while someone waits goes to that waiter: a
/// newcomer's try right after the release finds it taken. (Redlock's fast
/// path takes a free lock with a bare `SET NX`, so its release keeps the
/// lock for the first waiter instead of freeing it; without that the
/// newcomer passed the line.)
pub(crate) async fn newcomers_never_pass_a_waiter(subject: &Subject) {
    let name = unique("newcomer");
    let clients = clients(subject, 3).await;
    for round in 0..3 {
        let held = clients[0].acquire(&name).await.expect("holder");
        let waiter = queue_waiter(&clients[1], &name, Duration::from_secs(30)).await;
        held.release().await.expect("release");
        let newcomer = clients[2].try_acquire(&name).await.expect("newcomer's try");
        assert!(
            newcomer.is_none(),
            "round {round}: a newcomer took the lock ahead of a waiter"
        );
        let guard = within("the waiter is served", waiter)
            .await
            .expect("task")
            .expect("waiter acquires");
        guard.release().await.expect("release");
    }
}

/// One process holds 1,000 distinct locks at once (250 on a connection
/// variant).
pub(crate) async fn many_locks_at_once(subject: &Subject) {
    let prefix = unique("many");
    let locks = subject.client().await;
    let count = subject.rounds(1000);
    let mut guards = Vec::with_capacity(count);
    for i in 0..count {
        let guard = locks
            .try_acquire(&format!("{prefix}/{i}"))
            .await
            .expect("try_acquire");
        guards.push(guard.expect("a fresh name is free"));
    }
    assert!(guards.iter().all(|g| g.is_held()));
    let other = subject.client().await;
    assert!(
        other
            .try_acquire(&format!("{prefix}/{}", count / 2))
            .await
            .expect("probe")
            .is_none()
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
    assert!(
        other
            .try_acquire(&format!("{prefix}/{}", count - 1))
            .await
            .expect("probe")
            .is_some()
    );
}
