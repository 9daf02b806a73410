//! The blocking scenarios of several locks at once (`lock_all`) and of
//! leader elections (`campaign`, `observe`).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use omnilock_core::{ErrorKind, Operation};

use super::{BlockingSubject, PATIENCE, join_soon, unique};
use crate::registry::{Claim, Scenario, blocking_scenario};

/// The blocking scenarios of this module, with what each needs the store to claim: several locks at once (`lock_all`) and elections.
pub(crate) static SCENARIOS: &[Scenario<BlockingSubject>] = &[
    blocking_scenario!(blocking_lock_all_is_all_or_nothing),
    blocking_scenario!(blocking_lock_all_in_opposite_orders_never_deadlocks),
    blocking_scenario!(blocking_lock_all_lost_fires, Claim::BreakLock),
    blocking_scenario!(blocking_election, Claim::Elections),
    blocking_scenario!(blocking_observe_follows_the_leader, Claim::Elections),
];

/// `lock_all` takes every name, sorted, or none: a set with a busy part is
/// refused by `try_acquire` (and its free parts stay free), times out with
/// a typed error, and is taken once the holder drops its set; the parts
/// come out as separate guards that release one by one.
pub(crate) fn blocking_lock_all_is_all_or_nothing(subject: &BlockingSubject) {
    let base = unique("all");
    let [n1, n2, n3] = [1, 2, 3].map(|i| format!("{base}/{i}"));
    let [a, b] = subject.clients();
    let held = a
        .lock_all(&[n2.as_str(), n1.as_str()])
        .acquire()
        .expect("lock_all");
    let names: Vec<&str> = held.guards().iter().map(|g| g.name().as_str()).collect();
    assert_eq!(names, [n1.as_str(), n2.as_str()], "parts not sorted");
    assert!(held.is_held());
    assert!(held.token(&n1).is_some() && held.token(&n3).is_none());

    let refused = b
        .lock_all(&[n2.as_str(), n3.as_str()])
        .try_acquire()
        .expect("try_acquire");
    assert!(refused.is_none(), "took a set with a held part");
    let free = b.try_acquire(&n3).expect("probe");
    assert!(free.is_some(), "a refused set kept its free part");
    drop(free);

    let err = b
        .lock_all(&[n1.as_str(), n3.as_str()])
        .timeout(Duration::from_millis(200))
        .acquire()
        .expect_err("a set with a held part must time out");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(err.operation(), Some(Operation::Acquire));

    drop(held); // released before drop returns
    let all = b
        .lock_all(&[n1.as_str(), n2.as_str(), n3.as_str()])
        .timeout(PATIENCE)
        .acquire()
        .expect("the whole set once the holder dropped its own");
    let mut parts = all.into_guards().into_iter();
    let first = parts.next().expect("a part");
    first.release().expect("release one part");
    assert!(
        a.try_acquire(&n1).expect("probe").is_some(),
        "part not freed"
    );
    assert!(
        a.try_acquire(&n2).expect("probe").is_none(),
        "the other parts stay held"
    );
}

/// Threads taking the same names in opposite orders, over two clients,
/// all finish: `lock_all` orders the names itself.
pub(crate) fn blocking_lock_all_in_opposite_orders_never_deadlocks(subject: &BlockingSubject) {
    let base = unique("orders");
    let (x, y) = (format!("{base}/x"), format!("{base}/y"));
    let clients = subject.clients::<2>();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let locks = clients[i % 2].clone();
            let names = if i % 2 == 0 {
                [x.clone(), y.clone()]
            } else {
                [y.clone(), x.clone()]
            };
            thread::spawn(move || {
                for _ in 0..5 {
                    let all = locks
                        .lock_all(&[names[0].as_str(), names[1].as_str()])
                        .timeout(Duration::from_secs(120))
                        .acquire()
                        .expect("lock_all");
                    all.release().expect("release");
                }
            })
        })
        .collect();
    for thread in threads {
        join_soon("every lock_all in opposite orders finishes", thread);
    }
}

/// Breaking one part of a set sends its loss, naming that part, to the
/// set's channel and callback.
pub(crate) fn blocking_lock_all_lost_fires(subject: &BlockingSubject) {
    let base = unique("all-lost");
    let (p, q) = (format!("{base}/p"), format!("{base}/q"));
    let [a, admin] = subject.clients();
    let all = a
        .lock_all(&[p.as_str(), q.as_str()])
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock_all");
    let lost = all.lost_receiver();
    let (called_tx, called) = mpsc::channel();
    all.on_lost(move |loss| {
        let _ = called_tx.send(loss);
    });
    assert!(admin.break_lock(&q).expect("break"));
    let loss = lost.recv_timeout(PATIENCE).expect("the loss arrives");
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    assert_eq!(loss.lock(), Some(q.as_str()));
    let loss = called.recv_timeout(PATIENCE).expect("the callback runs");
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    assert!(!all.is_held());
}

/// One leader at a time: a second candidate waits (and times out when told
/// to), takes over when the leader drops its leadership, with a higher
/// term, and after the last resignation nobody leads.
pub(crate) fn blocking_election(subject: &BlockingSubject) {
    let [a, b] = subject.clients();
    let name = unique("election").replace('/', "-");
    let (ea, eb) = (a.election(&name), b.election(&name));
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

/// An observer sees nobody, then each leader with its term, then nobody
/// again, each change once; `changed` blocks a plain thread until then.
pub(crate) fn blocking_observe_follows_the_leader(subject: &BlockingSubject) {
    let [a, b] = subject.clients();
    let name = unique("observe").replace('/', "-");
    let election = a
        .election(&name)
        .with_poll_interval(Duration::from_millis(20));
    let observer = b
        .election(&name)
        .with_poll_interval(Duration::from_millis(20))
        .observe();
    let (changes_tx, changes) = mpsc::channel();
    // Ends at the first change after the test is done with the channel.
    thread::spawn(move || {
        for change in observer {
            if changes_tx.send(change).is_err() {
                return;
            }
        }
    });
    let next = || {
        changes
            .recv_timeout(PATIENCE)
            .expect("the observer reports a change")
            .expect("the observer reads the leader")
    };
    assert_eq!(next(), None, "nobody leads at the start");
    let first = election.campaign("a").expect("campaign");
    let first_term = first.term();
    let seen = next().expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("a", first_term));
    first.resign().expect("resign");
    assert_eq!(next(), None, "nobody leads after the resignation");
    let second = election.campaign("b").expect("campaign");
    let seen = next().expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("b", second.term()));
    assert!(seen.term > first_term, "term did not rise");
    second.resign().expect("resign");
}
