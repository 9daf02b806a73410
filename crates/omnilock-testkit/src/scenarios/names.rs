//! Names and namespaces: every distinct (configuration, name) pair is a
//! distinct lock. A store key that two names share is a lock that two owners
//! can hold "alone", and a `break` that frees the wrong one.

use std::time::Duration;

use omnilock_core::{ErrorKind, LockGuard, Locks, Owner};

use super::{unique, within};
use crate::Subject;
use crate::registry::{Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: lock names.
pub(crate) static SCENARIOS: &[Scenario] = &[scenario!(distinct_names_are_distinct_locks)];

/// Names that byte-compare different but that some store, collation or key
/// encoding could fold into one: trailing and leading spaces (MySQL PAD
/// SPACE collations), case, Unicode normalisation forms, the characters key
/// encodings use as separators or escapes, and hash-tag braces.
fn confusable_names(base: &str) -> Vec<String> {
    let suffixes = [
        "backup",
        "backup ",
        "backup   ",
        " backup",
        "Backup",
        "BACKUP",
        "\u{e9}t\u{e9}",     // été, NFC
        "e\u{301}te\u{301}", // été, NFD
        "stra\u{df}e",       // straße
        "strasse",
        "x:y",
        "x%3Ay",
        "x%253Ay",
        "x/y",
        "x%2Fy",
        "x\\y",
        ".",
        "..",
        "%2E",
        "{x}",
        "x",
        "x\u{200b}",
    ];
    suffixes.iter().map(|s| format!("{base}/{s}")).collect()
}

/// Names that differ only in trailing spaces, case, normalisation form or
/// escape characters are distinct locks: each can be held at once by its own
/// owner, the store reports each one's own holder, and breaking one leaves
/// the others held.
pub(crate) async fn distinct_names_are_distinct_locks(subject: &Subject) {
    let base = unique("distinct");
    let names = confusable_names(&base);
    let locks = subject.client().await;
    let mut guards: Vec<LockGuard> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let owner = Owner::new(&format!("owner-{i}")).expect("owner");
        let guard = locks
            .lock(name)
            .owner(&owner)
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: try_acquire {name:?}: {e}", subject.label()));
        match guard {
            Some(guard) => guards.push(guard),
            None => {
                let holder = locks.holder(name).await.ok().flatten();
                panic!(
                    "{}: {name:?} is busy although no one holds it: it shares a store key \
                     with another name (holder {holder:?})",
                    subject.label()
                )
            }
        }
    }
    let other = subject.client().await;
    check_holders(subject, &other, &names, 0).await;
    if other.capabilities().break_lock {
        assert!(
            other.break_lock(&names[0]).await.expect("break"),
            "{}: break found no holder",
            subject.label()
        );
        check_holders(subject, &other, &names, 1).await;
    }
    for guard in guards {
        let _ = guard.release().await;
    }
}

/// Every name from `from` on is held by `owner-<its index>`, as the store
/// reports (skipped where the store cannot say who holds a lock).
async fn check_holders(subject: &Subject, locks: &Locks, names: &[String], from: usize) {
    for (i, name) in names.iter().enumerate().skip(from) {
        match locks.holder(name).await {
            Ok(Some(holder)) => assert_eq!(
                holder.owner.as_str(),
                format!("owner-{i}"),
                "{}: {name:?} reports another name's holder",
                subject.label()
            ),
            Ok(None) => panic!(
                "{}: {name:?} is no longer held (another name's break or release freed it)",
                subject.label()
            ),
            Err(e) if e.kind() == ErrorKind::Unsupported => return,
            Err(e) => panic!("{}: holder {name:?}: {e}", subject.label()),
        }
    }
}

/// Two configurations of one store whose namespaces nest or abut (an etcd or
/// ZooKeeper prefix under another's lock, a Redis prefix that ends where
/// another's name begins) never see, block or break each other's locks.
/// `a_name` under `a` and `b_name` under `b` are the two locks that would
/// share store keys if the mapping were not one-to-one. Called by each
/// backend's tests with configurations that suit its store.
///
/// Both orders run (a's lock taken first, then b's first): on a store that
/// orders contenders by age, only one order shows an overlap.
pub async fn namespaces_are_disjoint(a: &Subject, a_name: &str, b: &Subject, b_name: &str) {
    one_way(a, a_name, b, b_name).await;
    one_way(b, b_name, a, a_name).await;
}

async fn one_way(a: &Subject, a_name: &str, b: &Subject, b_name: &str) {
    let (a_locks, b_locks) = (a.client().await, b.client().await);
    let label = format!("{} / {}", a.label(), b.label());
    let a_owner = Owner::new("namespace-a").expect("owner");
    let b_owner = Owner::new("namespace-b").expect("owner");
    let take = |locks: &Locks, name: &str, owner: &Owner| {
        let (locks, name, owner) = (locks.clone(), name.to_string(), owner.clone());
        async move {
            locks
                .lock(&name)
                .owner(&owner)
                .ttl(Duration::from_secs(30))
                .try_acquire()
                .await
        }
    };
    // Each side is free while the other holds.
    let a_guard = take(&a_locks, a_name, &a_owner)
        .await
        .expect("a: try_acquire")
        .unwrap_or_else(|| panic!("{label}: {a_name:?} busy on a fresh store"));
    assert_holder(&label, &b_locks, b_name, None).await;
    let b_guard = within("b acquires", take(&b_locks, b_name, &b_owner))
        .await
        .expect("b: try_acquire")
        .unwrap_or_else(|| panic!("{label}: {b_name:?} is blocked by the other namespace's lock"));
    assert_holder(&label, &a_locks, a_name, Some("namespace-a")).await;
    assert_holder(&label, &b_locks, b_name, Some("namespace-b")).await;

    // A break on one side frees that lock only.
    if b_locks.capabilities().break_lock {
        assert!(b_locks.break_lock(b_name).await.expect("break b"));
        assert!(a_guard.is_held(), "{label}: breaking b freed a");
        assert_holder(&label, &a_locks, a_name, Some("namespace-a")).await;
        drop(b_guard);
        // A new owner: the broken guard's owner would re-enter its own
        // (now stale) hold in this process instead of asking the store.
        let b_again = Owner::new("namespace-b-again").expect("owner");
        let again = take(&b_locks, b_name, &b_again)
            .await
            .expect("b: try_acquire again")
            .unwrap_or_else(|| panic!("{label}: {b_name:?} still busy after its break"));
        assert!(a_locks.break_lock(a_name).await.expect("break a"));
        assert_holder(&label, &b_locks, b_name, Some("namespace-b-again")).await;
        assert!(again.is_held(), "{label}: breaking a freed b");
        let _ = again.release().await;
        let _ = a_guard.release().await;
    } else {
        b_guard.release().await.expect("release b");
        assert_holder(&label, &a_locks, a_name, Some("namespace-a")).await;
        a_guard.release().await.expect("release a");
    }
    assert_holder(&label, &a_locks, a_name, None).await;
    assert_holder(&label, &b_locks, b_name, None).await;
}

async fn assert_holder(label: &str, locks: &Locks, name: &str, owner: Option<&str>) {
    match locks.holder(name).await {
        Ok(holder) => assert_eq!(
            holder.as_ref().map(|h| h.owner.as_str()),
            owner,
            "{label}: holder of {name:?}"
        ),
        Err(e) if e.kind() == ErrorKind::Unsupported => {}
        Err(e) => panic!("{label}: holder {name:?}: {e}"),
    }
}
