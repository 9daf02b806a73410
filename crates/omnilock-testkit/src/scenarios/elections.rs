//! Leader elections on a fair store that can say who holds a lock.

use std::time::{Duration, Instant};

use omnilock_core::Locks;
use tokio::sync::oneshot;

use super::{ABANDONED_TTL, PATIENCE, assert_freed_after_lease, clients, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: leader elections.
pub(crate) static SCENARIOS: &[Scenario] = &[
    // Elections serve candidates in the order they queued: fair stores only.
    scenario!(election_one_leader_at_a_time, Claim::Fair, Claim::Elections),
    scenario!(
        election_successor_takes_over_when_leader_dies,
        Claim::Fair,
        Claim::Elections
    ),
    scenario!(
        election_observers_see_every_change,
        Claim::Fair,
        Claim::Elections
    ),
    scenario!(
        election_longest_value_round_trips,
        Claim::Fair,
        Claim::Elections
    ),
    scenario!(
        election_candidate_gives_up_after_its_timeout,
        Claim::Fair,
        Claim::Elections
    ),
];

/// Queues a campaign for `value` and returns once it waits in line.
async fn queue_candidate(
    locks: &Locks,
    election: &str,
    value: &str,
) -> tokio::task::JoinHandle<omnilock_core::Result<omnilock_core::Leadership>> {
    let (queued_tx, queued_rx) = oneshot::channel();
    let election = locks.election(election);
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
pub(crate) async fn election_one_leader_at_a_time(subject: &Subject) {
    let name = unique("election");
    let [a, b, c, reader] = <[Locks; 4]>::try_from(clients(subject, 4).await).unwrap();
    let watch = reader.election(&name);
    assert_eq!(watch.leader().await.expect("leader"), None);
    let first = a
        .election(&name)
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

/// A candidate with a timeout gives up behind a leader that stays: the
/// error is a timeout naming the election's lock and the backend, and the
/// candidacy is withdrawn, so when the leader resigns nobody leads until a
/// new candidate campaigns, and that one leads at once.
pub(crate) async fn election_candidate_gives_up_after_its_timeout(subject: &Subject) {
    let name = unique("election-timeout");
    let [a, b, c] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let leader = a
        .election(&name)
        .campaign("leader")
        .await
        .expect("first leader");
    let patience = Duration::from_millis(300);
    let started = Instant::now();
    let err = b
        .election(&name)
        .candidate("impatient")
        .timeout(patience)
        .campaign()
        .await
        .expect_err("a candidate behind a leader that stays times out");
    assert!(started.elapsed() >= patience, "gave up before its timeout");
    assert_eq!(err.kind(), omnilock_core::ErrorKind::Timeout, "{err}");
    assert_eq!(
        err.lock(),
        Some(format!("election/{name}").as_str()),
        "{err}"
    );
    assert_eq!(err.backend(), Some(b.backend_kind()), "{err}");
    let watch = c.election(&name);
    assert_eq!(
        watch.leader().await.expect("leader").map(|l| l.value),
        Some("leader".to_string()),
        "the leader stays"
    );
    leader.resign().await.expect("resign");
    assert_eq!(
        watch.leader().await.expect("leader"),
        None,
        "the candidate that gave up was left in line"
    );
    let next = within(
        "a new candidate leads at once",
        watch.candidate("next").timeout(PATIENCE).campaign(),
    )
    .await
    .expect("the new candidate leads");
    assert_eq!(next.value(), "next");
    next.resign().await.expect("resign");
}

/// The longest value a candidate may announce (`MAX_ELECTION_VALUE_BYTES`,
/// multi-byte characters included) goes through the store and reads back
/// whole from another client; one byte more is refused before any I/O.
pub(crate) async fn election_longest_value_round_trips(subject: &Subject) {
    let name = unique("election-limit");
    let [a, reader] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let max = omnilock_core::MAX_ELECTION_VALUE_BYTES;
    // "é" is two bytes: the value is exactly `max` bytes, not characters.
    let longest = format!("{}{}", "é".repeat(max / 4), "v".repeat(max - max / 4 * 2));
    assert_eq!(longest.len(), max);
    let leader = a
        .election(&name)
        .campaign(&longest)
        .await
        .expect("the longest value campaigns");
    let seen = reader.election(&name).leader().await.expect("leader");
    assert_eq!(seen.map(|l| l.value), Some(longest.clone()));
    leader.resign().await.expect("resign");
    let err = a
        .election(&name)
        .campaign(&format!("{longest}v"))
        .await
        .expect_err("one byte too long");
    assert_eq!(err.kind(), omnilock_core::ErrorKind::InvalidConfig, "{err}");
}

/// A leader that dies (its runtime gone, as if the process died) is replaced
/// by the next candidate soon after its lease ends.
pub(crate) async fn election_successor_takes_over_when_leader_dies(subject: &Subject) {
    let name = unique("election-death");
    let ttl = ABANDONED_TTL;
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
    assert_freed_after_lease("the leadership", waited);
    let reader = subject.client().await;
    let now = reader.election(&name).leader().await.expect("leader");
    assert_eq!(now.map(|l| l.value), Some("heir".to_string()));
    heir.resign().await.expect("resign");
}

/// An observer sees every leader, in order, and then that nobody leads.
pub(crate) async fn election_observers_see_every_change(subject: &Subject) {
    let name = unique("election-observe");
    let clients = clients(subject, 3).await;
    let mut observer = clients[0]
        .election(&name)
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
