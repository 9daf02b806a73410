//! The API's promises about itself: capabilities that tell the truth,
//! invalid names refused before any I/O, errors that say where they happened.

use std::time::Duration;

use omnilock_core::ErrorKind;

use super::unique;
use crate::Subject;
use crate::registry::{Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: what a store claims, and the errors it gives.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(capabilities_tell_the_truth),
    scenario!(invalid_names_rejected),
    scenario!(errors_name_backend_and_lock),
];

/// The `holder` and `election` flags against the calls they name: claimed,
/// the call answers; not claimed, it answers `Unsupported` (never a wrong
/// answer, never a different error, never a silent wait: an election's
/// observer answers too).
pub(crate) async fn capabilities_tell_the_truth(subject: &Subject) {
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
    let election = locks.election(&unique("caps"));
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
    // An observer answers at once either way: the start where elections
    // work, `Unsupported` (for good) where they do not; it never hangs.
    let mut observer = election.observe();
    let first = tokio::time::timeout(Duration::from_secs(10), observer.changed())
        .await
        .unwrap_or_else(|_| panic!("{label}: observe() gave no first answer in 10 s"));
    match first {
        Ok(None) => assert!(
            caps.election,
            "{label}: observe() works, yet election=false"
        ),
        Ok(Some(_)) => panic!("{label}: an election never held has a leader"),
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            assert!(
                !caps.election,
                "{label}: election=true, yet observe() is unsupported"
            );
            assert!(
                observer.has_ended(),
                "{label}: Unsupported did not end the observation"
            );
            let again = observer.changed().await.expect_err("the same answer again");
            assert_eq!(again.kind(), ErrorKind::Unsupported, "{label}: {again}");
        }
        Err(e) => panic!("{label}: observe(): {e}"),
    }
}

/// Invalid names are typed errors on every operation, before any I/O.
pub(crate) async fn invalid_names_rejected(subject: &Subject) {
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

/// Errors carry the backend, the operation and the lock name.
pub(crate) async fn errors_name_backend_and_lock(subject: &Subject) {
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
