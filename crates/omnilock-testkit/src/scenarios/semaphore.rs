//! Counting semaphores: at most N permits held at once, across clients;
//! the permits count is agreed; leases, fencing and cancellation as for the
//! mutex.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use omnilock_core::{ErrorKind, LockGuard, Locks, Result};
use tokio::task::JoinHandle;

use super::{
    ABANDONED_TTL, PATIENCE, abandon, assert_freed_after_lease, clients, once_taken, queue_request,
    take, times_out, unique, within,
};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: semaphores, and what every counted primitive shares.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(primitives_reject_bad_input_and_report_support),
    scenario!(
        primitives_have_separate_namespaces,
        Claim::SemaphoreAndRwLock
    ),
    scenario!(semaphore_permits_never_exceeded, Claim::Semaphore),
    scenario!(semaphore_full_refuses_until_release, Claim::Semaphore),
    scenario!(semaphore_first_tries_at_once_never_error, Claim::Semaphore),
    scenario!(semaphore_permits_mismatch_rejected, Claim::Semaphore),
    scenario!(semaphore_two_counts_at_once_never_overlap, Claim::Semaphore),
    scenario!(semaphore_cancelled_acquire_leaves_nothing, Claim::Semaphore),
    scenario!(semaphore_fifo_order, Claim::Semaphore, Claim::Fair),
    scenario!(
        semaphore_tokens_rise,
        Claim::Semaphore,
        Claim::FencingTokens
    ),
    scenario!(semaphore_abandoned_permit_expires, Claim::Semaphore),
    scenario!(
        semaphore_paused_holder_is_told,
        Claim::Semaphore,
        Claim::LeaseRenewal
    ),
];

/// Queues an acquire of one permit in a task and returns the task once the
/// store reports it waiting.
async fn queue_permit(locks: &Locks, name: &str, permits: u32) -> JoinHandle<Result<LockGuard>> {
    let name = name.to_string();
    queue_request(locks, take(move |locks| locks.semaphore(&name, permits))).await
}

/// try-acquires a permit until one is free.
async fn once_permit(locks: &Locks, name: &str, permits: u32) -> LockGuard {
    once_taken(locks, |locks| locks.semaphore(name, permits)).await
}

/// try-acquires a permit once: the permit, or `None` when all are in use.
async fn try_permit(locks: &Locks, name: &str, permits: u32) -> Option<LockGuard> {
    locks
        .semaphore(name, permits)
        .try_acquire()
        .await
        .expect("try_acquire")
}

/// The one permit of `name`, held by a holder that stopped running (lease
/// `ttl`): a new client waits for it and gets it within the lease and
/// [`PATIENCE`] (`what` says why it frees).
async fn permit_frees_for_another(
    subject: &Subject,
    name: &str,
    ttl: Duration,
    what: &str,
) -> LockGuard {
    let thief = subject.client().await;
    let request = thief.semaphore(name, 1).timeout(ttl + PATIENCE);
    request.acquire().await.expect(what)
}

/// Takes a permit that has just been freed (its holder released, or a
/// cancelled waiter's entry goes in the background), soon, and releases it.
async fn take_freed_permit(what: &str, locks: &Locks, name: &str, permits: u32) {
    let permit = within(what, once_permit(locks, name, permits)).await;
    permit.release().await.expect("release");
}

/// 32 tasks on 4 clients take permits of a 3-permit semaphore 4 times each
/// (once on a connection variant): never more than 3 inside at once, and 3
/// at once do happen (the first holders wait for it).
pub(crate) async fn semaphore_permits_never_exceeded(subject: &Subject) {
    const PERMITS: u32 = 3;
    let name = unique("semaphore");
    let clients = clients(subject, 4).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let rounds = subject.rounds(4);
    let mut tasks = Vec::new();
    for i in 0..32 {
        let locks = clients[i % clients.len()].clone();
        let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let permit = locks
                    .semaphore(&name, PERMITS)
                    .timeout(Duration::from_secs(120))
                    .acquire()
                    .await
                    .expect("acquire a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(
                    now <= PERMITS as usize,
                    "{now} holders of {PERMITS} permits"
                );
                most.fetch_max(now, Ordering::SeqCst);
                // The first holders stay until all permits are in use once:
                // a semaphore that admits fewer never gets there.
                within("every permit is in use at once", async {
                    while most.load(Ordering::SeqCst) < PERMITS as usize {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                })
                .await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release a permit");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker task");
    }
    assert_eq!(most.load(Ordering::SeqCst), PERMITS as usize);
}

/// 16 first users try a fresh 3-permit semaphore at the same instant (a
/// database may roll one transaction back to break a deadlock between
/// them): every try answers, none with an error, and at most 3 hold.
pub(crate) async fn semaphore_first_tries_at_once_never_error(subject: &Subject) {
    const PERMITS: u32 = 3;
    let name = unique("semaphore-first");
    let clients = clients(subject, 4).await;
    let start = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (locks, name, start) = (
            clients[i % clients.len()].clone(),
            name.clone(),
            start.clone(),
        );
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            locks.semaphore(&name, PERMITS).try_acquire().await
        }));
    }
    let mut held = Vec::new();
    for task in tasks {
        match task.await.expect("worker task") {
            Ok(Some(permit)) => held.push(permit),
            Ok(None) => {}
            Err(err) => panic!("a first try failed instead of answering: {err}"),
        }
    }
    assert!(
        !held.is_empty() && held.len() <= PERMITS as usize,
        "{} of 16 first tries hold a {PERMITS}-permit semaphore",
        held.len()
    );
    for permit in held {
        permit.release().await.expect("release a permit");
    }
}

/// A full semaphore refuses try-acquire and times out a waiting acquire;
/// one release makes room for exactly one more.
pub(crate) async fn semaphore_full_refuses_until_release(subject: &Subject) {
    let name = unique("semaphore-full");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let first = a.semaphore(&name, 2).acquire().await.expect("first permit");
    let second = a
        .semaphore(&name, 2)
        .acquire()
        .await
        .expect("second permit");
    let busy = try_permit(&b, &name, 2).await;
    assert!(busy.is_none(), "a third permit of two");
    times_out(b.semaphore(&name, 2), Duration::from_millis(200)).await;
    first.release().await.expect("release");
    let third = within("a freed permit is taken", b.semaphore(&name, 2).acquire())
        .await
        .expect("a freed permit");
    let fourth = try_permit(&b, &name, 2).await;
    assert!(
        fourth.is_none(),
        "one release made room for one permit only"
    );
    second.release().await.expect("release");
    third.release().await.expect("release");
}

/// A client asking with another permits count than the one recorded gets
/// `Conflict` (try and wait alike), which changes nothing; once the
/// semaphore is unused, a new count may be recorded.
pub(crate) async fn semaphore_permits_mismatch_rejected(subject: &Subject) {
    let name = unique("semaphore-mismatch");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let held = a
        .semaphore(&name, 2)
        .acquire()
        .await
        .expect("a permit of 2");
    for wait in [false, true] {
        let request = b.semaphore(&name, 3).timeout(PATIENCE);
        let err = if wait {
            request.acquire().await.map(|_| ()).expect_err("3 permits")
        } else {
            request
                .try_acquire()
                .await
                .map(|_| ())
                .expect_err("3 permits")
        };
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        let message = err.to_string();
        assert!(
            message.contains('2') && message.contains('3'),
            "the error names both counts: {message}"
        );
    }
    // The recorded count stays 2: a second permit is there, a third is not.
    let second = try_permit(&b, &name, 2)
        .await
        .expect("the second of 2 permits");
    let third = try_permit(&b, &name, 2).await;
    assert!(third.is_none(), "the mismatch did not change the count");
    held.release().await.expect("release");
    second.release().await.expect("release");
    take_freed_permit("an unused semaphore takes a new count", &b, &name, 3).await;
}

/// Callers of two permit counts race on a fresh semaphore, four of each,
/// every one willing to wait: each either holds under its count or is
/// refused with `Conflict` (no other error, no timeout), and a holder of
/// one count never holds beside a holder of the other.
pub(crate) async fn semaphore_two_counts_at_once_never_overlap(subject: &Subject) {
    let name = unique("semaphore-two-counts");
    // Holders inside, per count (1 and 3), and what was seen wrong.
    let inside = Arc::new(std::sync::Mutex::new([0u32; 2]));
    let callers = clients(subject, 8)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, locks)| {
            let (name, inside) = (name.clone(), Arc::clone(&inside));
            tokio::spawn(async move {
                let side = i % 2;
                let permits = [1, 3][side];
                let request = locks.semaphore(&name, permits).timeout(PATIENCE);
                let guard = match request.acquire().await {
                    Ok(guard) => guard,
                    Err(err) if err.kind() == ErrorKind::Conflict => return Ok(None),
                    Err(err) => return Err(format!("count {permits}: {err}")),
                };
                let beside = {
                    let mut inside = inside.lock().unwrap();
                    inside[side] += 1;
                    (inside[1 - side] > 0 || inside[side] > permits)
                        .then(|| format!("count {permits} held beside {:?}", *inside))
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                inside.lock().unwrap()[side] -= 1;
                guard
                    .release()
                    .await
                    .map_err(|err| format!("release: {err}"))?;
                Ok(Some(beside))
            })
        })
        .collect::<Vec<_>>();
    let mut held = 0;
    for caller in callers {
        match caller.await.expect("a caller") {
            Ok(Some(None)) => held += 1,
            Ok(Some(Some(overlap))) => panic!("{overlap}"),
            Ok(None) => {}
            Err(err) => panic!("a caller failed otherwise than with Conflict: {err}"),
        }
    }
    assert!(held >= 1, "nobody held the semaphore");
}

/// Bad input is refused before any I/O with a clear error, on every store:
/// 0 permits, a bad name; and a store without semaphores or read-write
/// locks says `Unsupported` rather than handing out something weaker.
pub(crate) async fn primitives_reject_bad_input_and_report_support(subject: &Subject) {
    let locks = subject.client().await;
    let caps = locks.capabilities();
    let err = locks
        .semaphore(&unique("zero"), 0)
        .try_acquire()
        .await
        .expect_err("0 permits");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = locks
        .semaphore("", 2)
        .try_acquire()
        .await
        .expect_err("empty name");
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    let err = locks
        .rw_lock("")
        .read()
        .try_acquire()
        .await
        .expect_err("empty name");
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    let name = unique("support");
    for (offered, what) in [
        (caps.semaphore, "semaphore"),
        (caps.rw_lock, "read lock"),
        (caps.rw_lock, "write lock"),
    ] {
        let outcome = match what {
            "semaphore" => locks.semaphore(&name, 2).try_acquire().await,
            "read lock" => locks.rw_lock(&name).read().try_acquire().await,
            _ => locks.rw_lock(&name).write().try_acquire().await,
        };
        match outcome {
            Ok(Some(guard)) if offered => guard.release().await.expect("release"),
            Err(err) if !offered => {
                assert_eq!(err.kind(), ErrorKind::Unsupported, "{what}: {err}");
                assert!(err.to_string().contains(what), "names the {what}: {err}");
            }
            other => panic!(
                "{what}: claimed {offered}, got {:?}",
                other.map(|g| g.map(|g| g.token()))
            ),
        }
    }
}

/// The mutex, the semaphore and the read-write lock of one name are three
/// unrelated things: holding one does not block the others.
pub(crate) async fn primitives_have_separate_namespaces(subject: &Subject) {
    let name = unique("namespaces");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let mutex = a.acquire(&name).await.expect("the mutex");
    let permit = try_permit(&b, &name, 1)
        .await
        .expect("the semaphore of the mutex's name is free");
    let write = b
        .rw_lock(&name)
        .write()
        .try_acquire()
        .await
        .expect("try_acquire");
    let write = write.expect("the rw lock of the mutex's name is free");
    assert!(
        try_permit(&a, &name, 1).await.is_none(),
        "the semaphore is held"
    );
    assert!(
        a.rw_lock(&name)
            .read()
            .try_acquire()
            .await
            .expect("try")
            .is_none()
    );
    for guard in [mutex, permit, write] {
        guard.release().await.expect("release");
    }
}

/// A cancelled permit acquire (a timeout) leaves nothing behind: once the
/// holder releases, another client takes the permit, with no phantom
/// waiter ahead of it.
pub(crate) async fn semaphore_cancelled_acquire_leaves_nothing(subject: &Subject) {
    let name = unique("semaphore-cancel");
    let [a, b, c] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let held = a.semaphore(&name, 1).acquire().await.expect("the permit");
    times_out(b.semaphore(&name, 1), Duration::from_millis(300)).await;
    // A dropped future, mid-wait, too.
    let dropped = queue_permit(&b, &name, 1).await;
    dropped.abort();
    let _ = dropped.await;
    held.release().await.expect("release");
    take_freed_permit("the freed permit is free for anyone", &c, &name, 1).await;
}

/// Permits are granted in the order they were asked for.
pub(crate) async fn semaphore_fifo_order(subject: &Subject) {
    let name = unique("semaphore-fifo");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let one = a.semaphore(&name, 2).acquire().await.expect("permit 1");
    let two = a.semaphore(&name, 2).acquire().await.expect("permit 2");
    let first = queue_permit(&b, &name, 2).await;
    let second = queue_permit(&a, &name, 2).await;
    let third = queue_permit(&b, &name, 2).await;
    one.release().await.expect("release");
    let first = within("the first waiter gets the freed permit", first)
        .await
        .expect("task")
        .expect("permit");
    assert!(
        !second.is_finished() && !third.is_finished(),
        "one permit freed, one granted"
    );
    two.release().await.expect("release");
    let second = within("the second waiter is next", second)
        .await
        .expect("task")
        .expect("permit");
    assert!(!third.is_finished(), "two permits, both in use");
    first.release().await.expect("release");
    let third = within("the third waiter is last", third)
        .await
        .expect("task")
        .expect("permit");
    second.release().await.expect("release");
    third.release().await.expect("release");
}

/// Tokens rise across all permits of a semaphore, whoever holds them.
pub(crate) async fn semaphore_tokens_rise(subject: &Subject) {
    let name = unique("semaphore-tokens");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let mut last = 0;
    let mut held = Vec::new();
    for round in 0..6 {
        let locks = if round % 2 == 0 { &a } else { &b };
        let permit = locks.semaphore(&name, 3).acquire().await.expect("permit");
        assert!(
            permit.token() > last,
            "token {} after {last}",
            permit.token()
        );
        last = permit.token();
        held.push(permit);
        if held.len() == 3 {
            held.remove(0).release().await.expect("release");
        }
    }
    for permit in held {
        permit.release().await.expect("release");
    }
}

/// The permit of a holder that vanished (its process gone: no release, no
/// renewal) is free again soon after its lease ends.
pub(crate) async fn semaphore_abandoned_permit_expires(subject: &Subject) {
    let name = unique("semaphore-abandoned");
    let ttl = ABANDONED_TTL;
    let taken_at = abandon(subject, {
        let name = name.clone();
        move |locks| Box::pin(async move { locks.semaphore(&name, 1).ttl(ttl).acquire().await })
    });
    let permit = permit_frees_for_another(subject, &name, ttl, "the abandoned permit frees").await;
    let waited = taken_at.elapsed();
    assert_freed_after_lease("the permit", waited);
    permit.release().await.expect("release");
}

/// A holder that stops running (paused past its lease: no renewal) loses
/// its permit to a waiter, and is told when it runs again: `lost()` fires
/// and `is_held()` is false.
pub(crate) async fn semaphore_paused_holder_is_told(subject: &Subject) {
    let name = unique("semaphore-paused");
    let ttl = Duration::from_secs(1);
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
    let victim = subject.clone();
    let victim_name = name.clone();
    let paused = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let locks = runtime.block_on(victim.client());
        let guard = runtime
            .block_on(locks.semaphore(&victim_name, 1).ttl(ttl).acquire())
            .expect("the victim acquires");
        let _ = taken_tx.send(());
        // Paused: the runtime does not run, so neither does renewal.
        resume_rx.recv().expect("resume");
        runtime.block_on(async {
            let loss = within("the paused holder is told", guard.lost()).await;
            assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
            assert!(!guard.is_held(), "a lost permit is not held");
        });
        drop(guard);
    });
    within("the victim takes the permit", taken_rx)
        .await
        .expect("victim thread");
    let permit =
        permit_frees_for_another(subject, &name, ttl, "the paused holder's permit frees").await;
    resume_tx.send(()).expect("victim waiting");
    tokio::task::spawn_blocking(move || paused.join())
        .await
        .expect("join")
        .expect("the victim thread's checks pass");
    assert!(permit.is_held(), "the new holder keeps its permit");
    permit.release().await.expect("release");
}
