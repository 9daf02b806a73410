//! A leader-elected service: one instance does the scheduled work, the others
//! stand by, and a leader that loses its lease stops at once.
//!
//! Two instances of a scheduler campaign in the election `scheduler`. The
//! leader works in ticks and stamps each with its term (the election's
//! fencing token). When the leadership is lost (the store could not renew
//! the lease: a network partition, a paused process; here an operator
//! deposes the leader), the leader steps down at once; the other instance,
//! first in line, takes over with a higher term. The output shows the
//! overlap that fencing is for: the deposed leader keeps ticking until its
//! renewal finds the lease gone.
//!
//! ```sh
//! cargo run --example leader --features sqlite
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// One service instance: campaign, lead until the leadership is lost or
/// `terms` terms were served, then stop.
async fn instance(
    id: &'static str,
    locks: omnilock::Locks,
    terms: usize,
    led: Arc<Notify>,
) -> omnilock::Result<Vec<u64>> {
    let election = locks.election("scheduler");
    let mut served = Vec::new();
    while served.len() < terms {
        let me = election.campaign(id).await?;
        println!("{id}: leading, term {}", me.term());
        served.push(me.term());
        led.notify_one();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                // Work is stamped with the term, so the resources it touches
                // can refuse a deposed leader's late writes: a leader hears of
                // its loss only at its next renewal (within a third of the
                // TTL), and may overlap its successor until then.
                _ = tick.tick() => println!("{id}: scheduled work for term {}", me.term()),
                err = me.lost() => {
                    // Step down at once: another instance may already lead.
                    println!("{id}: lost the leadership ({}); stepping down", err.kind());
                    break;
                }
            }
        }
    }
    Ok(served)
}

#[tokio::main]
async fn main() -> omnilock::Result<()> {
    let dir = std::env::temp_dir().join(format!("omnilock-example-leader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the example directory");
    // A short lease, so a lost leadership is noticed within a second.
    let store = format!("sqlite://{}/locks.db?ttl=2s", dir.display());
    let operator = omnilock::connect(&store).await?;
    let led = Arc::new(Notify::new());

    let a = tokio::spawn(instance(
        "scheduler-a",
        omnilock::connect(&store).await?,
        1,
        led.clone(),
    ));
    led.notified().await;
    let b = tokio::spawn(instance(
        "scheduler-b",
        omnilock::connect(&store).await?,
        1,
        led.clone(),
    ));

    // Depose the leader: it steps down, and the other instance, waiting in
    // line, takes over with a higher term. Then depose that one too.
    for expect_next in [true, false] {
        tokio::time::sleep(Duration::from_millis(350)).await;
        let leader = operator
            .election("scheduler")
            .leader()
            .await?
            .expect("someone leads");
        println!("operator: deposing {} (term {})", leader.value, leader.term);
        operator.break_lock("election/scheduler").await?;
        if expect_next {
            led.notified().await;
        }
    }

    let (terms_a, terms_b) = (a.await.expect("a ran")?, b.await.expect("b ran")?);
    println!("scheduler-a served terms {terms_a:?}, scheduler-b {terms_b:?}");
    let mut all: Vec<u64> = terms_a.into_iter().chain(terms_b).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 2, "each leadership had its own term");
    std::fs::remove_dir_all(&dir).expect("remove the example directory");
    Ok(())
}
