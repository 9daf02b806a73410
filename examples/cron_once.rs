//! A cron job that must run once per night across machines.
//!
//! Every machine's cron starts this program at 02:00. Each one tries the lock
//! named after tonight's run without waiting: one wins and runs the job, the
//! others see it taken and exit. A machine whose clock or cron is late must
//! not run the job a second time after the winner finished and released, so
//! the winner records "done" under the lock, and every run checks that record
//! first, also under the lock.
//!
//! Here three "machines" are three tasks with their own connection to one
//! SQLite file; in production, point `STORE` at the store every machine
//! reaches (`postgres://…`, `etcd://…`, `redis://…`).
//!
//! ```sh
//! cargo run --example cron_once --features sqlite
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What each machine does when cron fires: run tonight's job unless someone
/// runs or ran it.
async fn nightly(machine: &str, store: &str, done_dir: &Path, night: &str) -> omnilock::Result<()> {
    let locks = omnilock::connect(store).await?;
    let name = format!("nightly-report/{night}");
    let Some(guard) = locks.try_acquire(&name).await? else {
        println!("{machine}: {name} is running elsewhere; skipping");
        return Ok(());
    };
    let done = done_dir.join(format!("{night}.done"));
    if done.exists() {
        println!("{machine}: {name} already ran; skipping");
    } else {
        println!(
            "{machine}: running {name} with fencing token {}",
            guard.token()
        );
        tokio::select! {
            _ = make_report() => {
                // Record success before releasing, so a late machine sees it.
                std::fs::write(&done, guard.token().to_string()).expect("write the done record");
                println!("{machine}: {name} done");
            }
            err = guard.lost() => {
                // The lease could not be kept: stop, and leave the job for
                // the next run to redo (no "done" record).
                println!("{machine}: lost the lock ({err}); stopping");
                return Err(err);
            }
        }
    }
    guard.release().await
}

async fn make_report() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::main]
async fn main() -> omnilock::Result<()> {
    let dir = example_dir("cron_once");
    let store = format!("sqlite://{}/locks.db?ttl=10s", dir.display());
    let night = "2026-11-23";

    // Cron fires on three machines at once…
    let runs = ["host-a", "host-b", "host-c"].map(|machine| {
        let (store, dir) = (store.clone(), dir.clone());
        tokio::spawn(async move { nightly(machine, &store, &dir, night).await })
    });
    for run in runs {
        run.await.expect("the task ran")?;
    }
    // …and once more, late, on a fourth: it must not run the job again.
    nightly("host-d (late)", &store, &dir, night).await?;

    let ran = std::fs::read_dir(&dir)
        .expect("read the example directory")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "done"))
        })
        .count();
    assert_eq!(ran, 1, "the job ran exactly once");
    Ok(())
}

/// A fresh directory for this example's files under the system temp dir.
fn example_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("omnilock-example-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the example directory");
    dir
}
