//! Guarded writes: a write in the store itself, conditional on a mutex
//! (`Capabilities::guarded_write`), applies while the guard's hold is the
//! lock's and never after: not after a break, a later holder, a release or
//! an expiry. The test binary gives the write ([`Subject::with_guarded_writes`]).

use std::sync::Arc;
use std::time::Duration;

use crate::registry::{Claim, Scenario, scenario};
use crate::{GuardedWrites, Subject};

use super::{PATIENCE, abandon, clients, unique};

/// The scenarios of this module, with what each needs the store to claim.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(
        guarded_write_applies_only_while_held,
        Claim::GuardedWrite,
        Claim::BreakLock
    ),
    scenario!(
        guarded_write_is_refused_after_an_expiry,
        Claim::GuardedWrite
    ),
];

/// The subject's guarded writes; a store that claims them on a subject
/// without any fails here rather than passing untested.
async fn writes(subject: &Subject) -> Arc<dyn GuardedWrites> {
    subject.guarded_writes().await.unwrap_or_else(|| {
        panic!(
            "{} claims guarded_write, but its test binary gives no guarded write \
             (Subject::with_guarded_writes)",
            subject.label()
        )
    })
}

/// A holder's guarded write applies; after a break it is refused, after a
/// later holder took the lock too, and the later holder's applies; once
/// that holder released, its write is refused as well. Each refused write
/// leaves the record as it was.
pub(crate) async fn guarded_write_applies_only_while_held(subject: &Subject) {
    let name = unique("guarded");
    let record = unique("record");
    let writes = writes(subject).await;
    let [a, b] = <[omnilock_core::Locks; 2]>::try_from(clients(subject, 2).await).unwrap();

    let first = a.acquire(&name).await.expect("acquire");
    let first_write = writes.prepare(&first, &record).expect("prepare");
    assert!(first_write.write(1).await.expect("write"), "held: applies");
    assert_eq!(writes.read(&record).await.expect("read"), Some(1));

    assert!(
        b.break_lock(&name).await.expect("break"),
        "the lock was held"
    );
    assert!(
        !first_write.write(2).await.expect("write"),
        "applied after a break"
    );
    let later = b.acquire(&name).await.expect("the next holder");
    assert!(
        !first_write.write(3).await.expect("write"),
        "applied under a later holder"
    );
    let later_write = writes.prepare(&later, &record).expect("prepare");
    assert!(later_write.write(4).await.expect("write"), "held: applies");
    later.release().await.expect("release");
    assert!(
        !later_write.write(5).await.expect("write"),
        "applied after its release"
    );
    assert_eq!(writes.read(&record).await.expect("read"), Some(4));
    drop(first);
}

/// A holder that vanishes (its process gone, its lease left to run out):
/// once another client holds the lock, the vanished holder's prepared
/// write is refused.
pub(crate) async fn guarded_write_is_refused_after_an_expiry(subject: &Subject) {
    let name = unique("guarded-expiry");
    let record = unique("record");
    let ttl = Duration::from_secs(2);
    let writes = writes(subject).await;
    let (prepared_tx, prepared_rx) = std::sync::mpsc::channel();
    abandon(subject, {
        let (name, record, writes) = (name.clone(), record.clone(), writes.clone());
        move |locks| {
            Box::pin(async move {
                let guard = locks.lock(&name).ttl(ttl).acquire().await?;
                let prepared = writes.prepare(&guard, &record).expect("prepare");
                assert!(prepared.write(1).await.expect("write"), "held: applies");
                let _ = prepared_tx.send(prepared);
                Ok(guard)
            })
        }
    });
    let vanished = prepared_rx.recv().expect("the vanished holder's write");
    let next = subject
        .client()
        .await
        .lock(&name)
        .timeout(ttl + PATIENCE)
        .acquire()
        .await
        .expect("the lease runs out");
    assert!(
        !vanished.write(2).await.expect("write"),
        "a write of an expired holder applied"
    );
    assert_eq!(writes.read(&record).await.expect("read"), Some(1));
    next.release().await.expect("release");
}
