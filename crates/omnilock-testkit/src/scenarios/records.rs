//! Records: notes the store keeps for a given time, apart from locks, that
//! outlive their writer (the done record of `omnilock run --once-per`).

use std::time::{Duration, Instant};

use omnilock_core::ErrorKind;

use super::{PATIENCE, clients, unique};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(records_are_refused_where_not_claimed),
    scenario!(records_outlive_their_writer_for_their_time, Claim::Records),
];

/// Where records are not claimed, every call answers `Unsupported`; bad
/// values and keeps are refused before any I/O everywhere.
pub(crate) async fn records_are_refused_where_not_claimed(subject: &Subject) {
    let locks = subject.client().await;
    let name = unique("record-refused");
    let keep = Duration::from_secs(30);
    if !locks.capabilities().records {
        for err in [
            locks.write_record(&name, "v", keep).await.unwrap_err(),
            locks.read_record(&name).await.unwrap_err(),
            locks.delete_record(&name).await.unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        }
        return;
    }
    let err = locks.write_record(&name, "a\nb", keep).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = locks
        .write_record(&name, "v", Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let long = "x".repeat(omnilock_core::MAX_RECORD_BYTES + 1);
    let err = locks.write_record(&name, &long, keep).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = locks.read_record("bad\nname").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    assert_eq!(
        locks.read_record(&name).await.expect("read"),
        None,
        "nothing was written"
    );
}

/// A record written by one client (which then closes) is read by another
/// with its value and time left; a second write replaces it; it does not
/// block the lock of the same name; a short one is dropped once its time
/// has passed; a delete drops it at once.
pub(crate) async fn records_outlive_their_writer_for_their_time(subject: &Subject) {
    let [writer, reader] = <[_; 2]>::try_from(clients(subject, 2).await).unwrap();
    let name = unique("record ünï 'q'");
    let keep = Duration::from_secs(30);
    writer
        .write_record(&name, "first", keep)
        .await
        .expect("write");
    writer
        .write_record(&name, "started 2026-11-29T02:00:00Z by db-3", keep)
        .await
        .expect("replace");
    writer.close().await;
    let record = reader
        .read_record(&name)
        .await
        .expect("read")
        .expect("kept after its writer closed");
    assert_eq!(record.value, "started 2026-11-29T02:00:00Z by db-3");
    if let Some(left) = record.left {
        assert!(
            !left.is_zero() && left <= keep + Duration::from_secs(1),
            "{left:?} left of {keep:?}"
        );
    }
    let lock = reader.try_acquire(&name).await.expect("try_acquire");
    assert!(lock.is_some(), "a record blocked the lock of its name");
    drop(lock);

    assert!(reader.delete_record(&name).await.expect("delete"));
    assert_eq!(reader.read_record(&name).await.expect("read"), None);
    assert!(!reader.delete_record(&name).await.expect("delete again"));

    let short = format!("{name}/short");
    let written = Instant::now();
    reader
        .write_record(&short, "brief", Duration::from_secs(1))
        .await
        .expect("write a short one");
    loop {
        let read = reader.read_record(&short).await.expect("read");
        let age = written.elapsed();
        match read {
            Some(_) if age < PATIENCE => tokio::time::sleep(Duration::from_millis(100)).await,
            Some(_) => panic!("a 1 s record still kept after {age:?}"),
            None => {
                assert!(
                    age >= Duration::from_millis(900),
                    "a 1 s record dropped after {age:?}"
                );
                assert!(
                    age <= Duration::from_secs(4),
                    "a 1 s record dropped only after {age:?}"
                );
                break;
            }
        }
    }
}
