//! Inspection and listing: what `Locks::inspect` and `Locks::list` report
//! matches the holds and waits the scenario made, for each kind of lock,
//! and stores that cannot answer say so.

use std::time::{Duration, SystemTime};

use omnilock_core::{
    Capabilities, ErrorKind, Held, Inspection, Listed, LockGuard, LockKind, Locks, Owner, Side,
};

use super::{PATIENCE, caps, clients, queue_request, take, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(inspect_and_list_are_refused_where_not_claimed),
    scenario!(inspect_reports_the_mutex_holder_and_waiters, Claim::Inspect),
    scenario!(
        inspect_reports_semaphore_holders_and_free_permits,
        Claim::Inspect,
        Claim::Semaphore
    ),
    scenario!(
        inspect_reports_each_side_of_a_rw_lock,
        Claim::Inspect,
        Claim::RwLock
    ),
    scenario!(list_finds_the_held_locks_under_a_prefix, Claim::List),
    scenario!(
        break_holds_frees_permits_and_sides,
        Claim::BreakLock,
        Claim::SemaphoreAndRwLock
    ),
];

/// How far a holder's `since` may stray from the client's clock: the store
/// keeps its own (second-resolution on some databases).
const CLOCK_SLACK: Duration = Duration::from_secs(2);

/// The lease the scenarios' holds ask for.
const TTL: Duration = Duration::from_secs(30);

fn owner(label: &str) -> Owner {
    Owner::new(label).expect("owner")
}

/// Asserts that `held` is `guard`'s hold by `owner` on `side`, taken
/// between `before` and `after`, with a lease no longer than [`TTL`].
fn assert_held(
    caps: &Capabilities,
    held: &Held,
    guard: &LockGuard,
    owner: &Owner,
    side: Side,
    (before, after): (SystemTime, SystemTime),
) {
    assert_eq!(&held.owner, owner, "the holder's owner: {held:?}");
    assert_eq!(held.side, side, "the holder's side: {held:?}");
    if caps.fencing {
        assert_eq!(held.token, guard.token(), "the holder's token: {held:?}");
    }
    if let Some(since) = held.since {
        assert!(
            since + CLOCK_SLACK >= before && since <= after + CLOCK_SLACK,
            "held since {since:?}, taken between {before:?} and {after:?}"
        );
    }
    if let Some(left) = held.lease_left {
        assert!(
            !left.is_zero() && left <= TTL + Duration::from_secs(1),
            "a lease of {TTL:?} has {left:?} left"
        );
    }
}

/// Inspects until `ready` holds (a waiter's entry may reach the store a
/// moment after it reports waiting), then returns what was seen.
async fn inspect_until(
    locks: &Locks,
    name: &str,
    kind: LockKind,
    what: &str,
    ready: impl Fn(&Inspection) -> bool,
) -> Inspection {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = locks.inspect(name, kind).await.expect("inspect");
        if ready(&seen) {
            return seen;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: not seen within {PATIENCE:?}; last inspection {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The owners of `seen`'s holders, sorted.
fn holder_owners(seen: &Inspection) -> Vec<Owner> {
    let mut owners: Vec<Owner> = seen.holders.iter().map(|h| h.owner.clone()).collect();
    owners.sort();
    owners
}

/// A waiter's entry names `owner` where the store records owners.
fn waits(seen: &Inspection, owner: &Owner, side: Side) -> bool {
    seen.waiters.as_ref().is_some_and(|waiters| {
        waiters
            .iter()
            .any(|w| w.side == side && w.owner.as_ref().is_none_or(|o| o == owner))
    })
}

/// Where `inspect` or `list` is not claimed, the call answers
/// `Unsupported` before any I/O, never an empty answer that reads as "free".
pub(crate) async fn inspect_and_list_are_refused_where_not_claimed(subject: &Subject) {
    let locks = subject.client().await;
    let caps = locks.capabilities();
    let name = unique("inspect-refused");
    for kind in LockKind::ALL {
        let offered = match kind {
            LockKind::Mutex => true,
            LockKind::Semaphore => caps.semaphore,
            LockKind::RwLock => caps.rw_lock,
            _ => false,
        };
        let answer = locks.inspect(&name, kind).await;
        if caps.inspect && offered {
            let seen = answer.unwrap_or_else(|e| panic!("inspect {kind}: {e}"));
            assert!(seen.is_free(), "a name never used is free: {seen:?}");
            assert_eq!(seen.kind, kind);
            assert_eq!(seen.name, name);
        } else {
            let err = answer.expect_err("inspect where not claimed");
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        }
    }
    let bad = locks.inspect("a\nb", LockKind::Mutex).await.unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidName, "{bad}");
    let listed = locks.list(&name).await;
    if caps.list {
        assert_eq!(listed.expect("list"), [], "nothing is held under {name:?}");
        let bad = locks.list("a\u{7}").await.unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::InvalidName, "{bad}");
    } else {
        let err = listed.expect_err("list where not claimed");
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }
}

/// A held mutex shows its holder (owner, token, since, lease); a queued
/// waiter shows in line where the store records waiters; after the
/// hand-off the waiter is the holder, and after its release the lock is
/// free.
pub(crate) async fn inspect_reports_the_mutex_holder_and_waiters(subject: &Subject) {
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let caps = a.capabilities();
    let name = unique("inspect-mutex");
    let (first, second) = (owner("inspect-first"), owner("inspect-second"));

    let before = SystemTime::now();
    let guard = a
        .lock(&name)
        .owner(&first)
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    let taken = (before, SystemTime::now());
    let seen = b.inspect(&name, LockKind::Mutex).await.expect("inspect");
    assert_eq!(seen.holders.len(), 1, "one holder: {seen:?}");
    assert_held(
        &caps,
        &seen.holders[0],
        &guard,
        &first,
        Side::Exclusive,
        taken,
    );
    assert_eq!(seen.permits, None);
    if caps.inspect_waiters {
        assert_eq!(seen.waiters.as_deref(), Some(&[][..]), "nobody waits yet");
    } else {
        assert_eq!(seen.waiters, None, "waiters not claimed: none reported");
    }

    if caps.inspect_waiters {
        let second_name = name.clone();
        let second_owner = second.clone();
        let waiter = queue_request(
            &b,
            take(move |locks| locks.lock(&second_name).owner(&second_owner).ttl(TTL)),
        )
        .await;
        let seen = inspect_until(&a, &name, LockKind::Mutex, "the waiter", |seen| {
            waits(seen, &second, Side::Exclusive)
        })
        .await;
        assert_eq!(seen.waiters.as_ref().map(Vec::len), Some(1), "{seen:?}");
        assert_eq!(
            holder_owners(&seen),
            std::slice::from_ref(&first),
            "{seen:?}"
        );
        let before = SystemTime::now();
        guard.release().await.expect("release");
        let second_guard = within("the hand-off", waiter)
            .await
            .expect("join")
            .expect("the waiter acquires");
        let taken = (before, SystemTime::now());
        let seen = a.inspect(&name, LockKind::Mutex).await.expect("inspect");
        assert_eq!(seen.holders.len(), 1, "{seen:?}");
        assert_held(
            &caps,
            &seen.holders[0],
            &second_guard,
            &second,
            Side::Exclusive,
            taken,
        );
        assert_eq!(seen.waiters.as_deref(), Some(&[][..]), "{seen:?}");
        second_guard.release().await.expect("release");
    } else {
        guard.release().await.expect("release");
    }
    let seen = b.inspect(&name, LockKind::Mutex).await.expect("inspect");
    assert!(seen.is_free(), "released: {seen:?}");
}

/// Two of three permits held: both holders with their tokens, the
/// recorded permits, one free; a fourth caller waits in line where the
/// store records waiters.
pub(crate) async fn inspect_reports_semaphore_holders_and_free_permits(subject: &Subject) {
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let caps = a.capabilities();
    let name = unique("inspect-semaphore");
    let owners = [owner("permit-a"), owner("permit-b"), owner("permit-c")];
    let mut guards = Vec::new();
    let mut times = Vec::new();
    for (at, who) in owners.iter().take(2).enumerate() {
        let client = if at == 0 { &a } else { &b };
        let before = SystemTime::now();
        let guard = client
            .semaphore(&name, 3)
            .owner(who)
            .ttl(TTL)
            .acquire()
            .await
            .expect("a permit");
        times.push((before, SystemTime::now()));
        guards.push(guard);
    }
    let seen = a
        .inspect(&name, LockKind::Semaphore)
        .await
        .expect("inspect");
    assert_eq!(seen.kind, LockKind::Semaphore);
    assert_eq!(seen.permits, Some(3), "{seen:?}");
    assert_eq!(seen.free_permits(), Some(1), "{seen:?}");
    assert_eq!(holder_owners(&seen), owners[..2], "{seen:?}");
    for ((guard, who), taken) in guards.iter().zip(&owners).zip(&times) {
        let held = seen
            .holders
            .iter()
            .find(|h| &h.owner == who)
            .expect("listed");
        assert_held(&caps, held, guard, who, Side::Permit, *taken);
    }
    let mutex = a.inspect(&name, LockKind::Mutex).await.expect("inspect");
    assert!(mutex.is_free(), "the mutex of the name is apart: {mutex:?}");

    guards.push(
        b.semaphore(&name, 3)
            .owner(&owners[2])
            .ttl(TTL)
            .acquire()
            .await
            .expect("the third permit"),
    );
    if caps.inspect_waiters {
        let late = owner("permit-late");
        let (late_owner, late_name) = (late.clone(), name.clone());
        let waiter = queue_request(
            &a,
            take(move |locks| locks.semaphore(&late_name, 3).owner(&late_owner).ttl(TTL)),
        )
        .await;
        let seen = inspect_until(&b, &name, LockKind::Semaphore, "the late caller", |seen| {
            waits(seen, &late, Side::Permit)
        })
        .await;
        assert_eq!(seen.free_permits(), Some(0), "{seen:?}");
        assert_eq!(seen.holders.len(), 3, "{seen:?}");
        waiter.abort();
        let _ = waiter.await;
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
    let seen = inspect_until(&b, &name, LockKind::Semaphore, "all released", |seen| {
        seen.is_free()
            && seen
                .waiters
                .as_ref()
                .is_none_or(|waiters| waiters.is_empty())
    })
    .await;
    assert!(seen.holders.is_empty(), "{seen:?}");
}

/// Two readers show as two holders on the read side; a writer waits on
/// the write side where the store records waiters, then holds alone.
pub(crate) async fn inspect_reports_each_side_of_a_rw_lock(subject: &Subject) {
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let caps = a.capabilities();
    let name = unique("inspect-rw");
    let readers = [owner("reader-a"), owner("reader-b")];
    let writer = owner("writer");
    let mut guards = Vec::new();
    for (at, who) in readers.iter().enumerate() {
        let client = if at == 0 { &a } else { &b };
        let before = SystemTime::now();
        let guard = client
            .rw_lock(&name)
            .read()
            .owner(who)
            .ttl(TTL)
            .acquire()
            .await
            .expect("read");
        guards.push((guard, (before, SystemTime::now())));
    }
    let seen = a.inspect(&name, LockKind::RwLock).await.expect("inspect");
    assert_eq!(seen.kind, LockKind::RwLock);
    assert_eq!(seen.permits, None, "{seen:?}");
    assert_eq!(holder_owners(&seen), readers, "{seen:?}");
    for ((guard, taken), who) in guards.iter().zip(&readers) {
        let held = seen
            .holders
            .iter()
            .find(|h| &h.owner == who)
            .expect("listed");
        assert_held(&caps, held, guard, who, Side::Read, *taken);
    }

    let (writer_owner, writer_name) = (writer.clone(), name.clone());
    let waiting_writer = queue_request(
        &b,
        take(move |locks| {
            locks
                .rw_lock(&writer_name)
                .write()
                .owner(&writer_owner)
                .ttl(TTL)
        }),
    )
    .await;
    if caps.inspect_waiters {
        let seen = inspect_until(&a, &name, LockKind::RwLock, "the writer", |seen| {
            waits(seen, &writer, Side::Write)
        })
        .await;
        assert_eq!(seen.holders.len(), 2, "the readers still hold: {seen:?}");
    }
    let before = SystemTime::now();
    for (guard, _) in guards {
        guard.release().await.expect("release");
    }
    let write = within("the writer's turn", waiting_writer)
        .await
        .expect("join")
        .expect("the writer acquires");
    let taken = (before, SystemTime::now());
    let seen = a.inspect(&name, LockKind::RwLock).await.expect("inspect");
    assert_eq!(seen.holders.len(), 1, "the writer alone: {seen:?}");
    assert_held(&caps, &seen.holders[0], &write, &writer, Side::Write, taken);
    write.release().await.expect("release");
    let seen = a.inspect(&name, LockKind::RwLock).await.expect("inspect");
    assert!(seen.is_free(), "{seen:?}");
}

/// `list(prefix)` gives exactly the held locks under the prefix, of every
/// kind the store offers, with names that need escaping in the store
/// among them; not a sibling prefix, not a released lock.
pub(crate) async fn list_finds_the_held_locks_under_a_prefix(subject: &Subject) {
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let caps = caps(subject).await;
    let prefix = format!("{}/", unique("list"));
    let sibling = format!("{}-sibling/x", prefix.trim_end_matches('/'));
    let odd = format!("{prefix}ünï cödé 'q' %_*");
    let nested = format!("{prefix}deeper/job");

    let mut guards = vec![
        a.acquire(&format!("{prefix}a")).await.expect("a"),
        b.acquire(&odd).await.expect("odd"),
        a.acquire(&nested).await.expect("nested"),
        b.acquire(&sibling).await.expect("sibling"),
    ];
    let mut expected = vec![
        Listed::new(format!("{prefix}a"), LockKind::Mutex),
        Listed::new(odd.clone(), LockKind::Mutex),
        Listed::new(nested.clone(), LockKind::Mutex),
    ];
    if caps.semaphore {
        guards.push(
            a.semaphore(&format!("{prefix}a"), 2)
                .acquire()
                .await
                .expect("a permit"),
        );
        expected.push(Listed::new(format!("{prefix}a"), LockKind::Semaphore));
    }
    if caps.rw_lock {
        guards.push(
            b.rw_lock(&format!("{prefix}rw"))
                .read()
                .acquire()
                .await
                .expect("a reader"),
        );
        expected.push(Listed::new(format!("{prefix}rw"), LockKind::RwLock));
    }
    expected.sort();
    let listed = b.list(&prefix).await.expect("list");
    assert_eq!(listed, expected, "under {prefix:?}");
    let everything = a.list("").await.expect("list everything");
    for want in &expected {
        assert!(
            everything.contains(want),
            "{want:?} missing from list(\"\")"
        );
    }

    for guard in guards {
        guard.release().await.expect("release");
    }
    let listed = a.list(&prefix).await.expect("list");
    assert_eq!(listed, [], "all released under {prefix:?}");
}

/// `break_holds` removes one owner's permit, then every permit, then a
/// read-write lock's readers: each broken holder is told, the others keep
/// theirs, the freed room is taken at once, and a waiting writer gets the
/// lock when the readers are broken.
pub(crate) async fn break_holds_frees_permits_and_sides(subject: &Subject) {
    let [a, admin] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let name = unique("break-holds");
    let (stuck, other) = (owner("stuck-worker"), owner("other-worker"));
    // A short lease, so that a broken holder learns of it at its next
    // renewal (a third of the lease) on stores that tell it no sooner.
    let ttl = Duration::from_secs(3);
    let err = admin
        .break_holds(&name, LockKind::Mutex, Some(&stuck))
        .await
        .expect_err("a mutex is not broken by owner");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let permit = |who: &Owner| a.semaphore(&name, 2).owner(who).ttl(ttl).acquire();
    let stuck_permit = permit(&stuck).await.expect("stuck's permit");
    let other_permit = permit(&other).await.expect("other's permit");
    assert_eq!(
        admin
            .break_holds(&name, LockKind::Semaphore, Some(&owner("nobody")))
            .await
            .expect("break nobody's"),
        0
    );
    assert_eq!(
        admin
            .break_holds(&name, LockKind::Semaphore, Some(&stuck))
            .await
            .expect("break stuck's"),
        1
    );
    let loss = within("the broken permit's holder is told", stuck_permit.lost()).await;
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    assert!(other_permit.is_held(), "another owner's permit was broken");
    let taken = within("the freed permit is taken", permit(&owner("next")))
        .await
        .expect("the freed permit");
    assert_eq!(
        admin
            .break_holds(&name, LockKind::Semaphore, None)
            .await
            .expect("break all"),
        2
    );
    for guard in [&other_permit, &taken] {
        let loss = within("every permit's holder is told", guard.lost()).await;
        assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    }
    let refilled = [permit(&stuck).await, permit(&other).await];
    for guard in refilled {
        guard
            .expect("both permits are free")
            .release()
            .await
            .expect("release");
    }

    let reader = a
        .rw_lock(&name)
        .read()
        .owner(&stuck)
        .ttl(ttl)
        .acquire()
        .await
        .expect("a reader");
    let writer_name = name.clone();
    let writer = queue_request(
        &a,
        take(move |locks| locks.rw_lock(&writer_name).write().ttl(ttl)),
    )
    .await;
    assert_eq!(
        admin
            .break_holds(&name, LockKind::RwLock, None)
            .await
            .expect("break the readers"),
        1
    );
    let write = within("the waiting writer gets the lock", writer)
        .await
        .expect("join")
        .expect("the writer acquires");
    let loss = within("the broken reader is told", reader.lost()).await;
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    write.release().await.expect("release");
}
