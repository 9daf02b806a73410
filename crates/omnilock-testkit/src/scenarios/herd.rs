//! No herd: the hand-off checks that read the store's own request counter
//! (given to the subject with [`Subject::with_request_counter`]).

use std::time::Duration;

use omnilock_core::{LockRequest, Locks};

use super::{clients, unique, within};
use crate::Subject;
use crate::fixtures::{Link, queue_handoff_chain};
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios that read store-wide request counters: a test binary of
/// their own runs them, one at a time, since any test running beside them
/// adds to the counts.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(
        handoff_cost_is_flat,
        Claim::PushWakeups,
        Claim::RequestCounter
    ),
    scenario!(
        semaphore_handoff_cost_is_flat,
        Claim::Semaphore,
        Claim::PushWakeups,
        Claim::RequestCounter
    ),
    scenario!(
        rw_handoff_cost_is_flat,
        Claim::RwLock,
        Claim::PushWakeups,
        Claim::RequestCounter
    ),
];

/// No herd: a release wakes one waiter, so the store requests a hand-off
/// costs do not grow with the number of waiters. Measured on a chain of
/// hand-offs (each waiter releases as soon as it is granted) with 2 and with
/// 64 waiters, from the store's own request counters. Needs push wake-ups
/// and a request counter ([`Subject::with_request_counter`]); runs alone (see
/// [`crate::herd_main!`]).
pub(crate) async fn handoff_cost_is_flat(subject: &Subject) {
    fn mutex<'a>(locks: &'a Locks, name: &str) -> LockRequest<'a> {
        locks.lock(name)
    }
    flat_handoffs(subject, "lock", mutex).await;
}

/// The same for a one-permit semaphore: a release wakes one waiter, not
/// every waiter of the name.
pub(crate) async fn semaphore_handoff_cost_is_flat(subject: &Subject) {
    fn permit<'a>(locks: &'a Locks, name: &str) -> LockRequest<'a> {
        locks.semaphore(name, 1)
    }
    flat_handoffs(subject, "semaphore", permit).await;
}

/// The same for a chain of writers of a read-write lock.
pub(crate) async fn rw_handoff_cost_is_flat(subject: &Subject) {
    fn writer<'a>(locks: &'a Locks, name: &str) -> LockRequest<'a> {
        locks.rw_lock(name).write()
    }
    flat_handoffs(subject, "write lock", writer).await;
}

async fn flat_handoffs(subject: &Subject, what: &str, take: Link) {
    let few = handoff_cost(subject, 2, take).await;
    let many = handoff_cost(subject, 64, take).await;
    eprintln!(
        "{} ({what}): store requests per hand-off: {few:.2} with 2 waiters, {many:.2} with 64",
        subject.label()
    );
    assert!(
        many <= few * 1.5 + 1.0,
        "a hand-off costs {many:.2} requests with 64 waiters but {few:.2} with 2: \
         releases wake more than one waiter"
    );
}

/// Requests per hand-off along a chain of `waiters` queued acquisitions.
async fn handoff_cost(subject: &Subject, waiters: usize, take: Link) -> f64 {
    let name = unique("herd");
    let clients = clients(subject, 4).await;
    let ttl = Duration::from_secs(60);
    let holder = take(&clients[0], &name)
        .ttl(ttl)
        .acquire()
        .await
        .expect("holder");
    let chain = queue_handoff_chain(&clients, &name, waiters, ttl, take).await;
    // Waiters finish setting up (watches, subscriptions) after they report
    // waiting: start counting once the store is quiet.
    let start = quiet_count(subject).await;
    holder.release().await.expect("release");
    for task in chain {
        within("the chain of hand-offs", task)
            .await
            .expect("waiter task");
    }
    let end = served(subject).await;
    (end - start) as f64 / waiters as f64
}

/// The store's request count (the scenario runs only where it is claimed).
async fn served(subject: &Subject) -> u64 {
    match subject.requests_served().await {
        Some(Ok(count)) => count,
        Some(Err(err)) => panic!("request counter: {err}"),
        None => panic!("no request counter (claimed)"),
    }
}

/// The request count once two reads 100 ms apart agree.
async fn quiet_count(subject: &Subject) -> u64 {
    let mut last = served(subject).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = served(subject).await;
        if now == last {
            return now;
        }
        last = now;
    }
    last
}
