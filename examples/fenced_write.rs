//! A fenced write: the database refuses a write from a holder whose lock has
//! passed to someone else.
//!
//! A lock alone cannot stop a holder that was paused (a GC pause, a frozen
//! VM, a slow disk) past its lease: it wakes up still believing it holds the
//! lock, while the next holder is already writing. The fencing token closes
//! that gap. Every write carries the holder's token, and the row keeps the
//! highest token it has seen; a write with a lower token changes nothing.
//!
//! The resource here is an `accounts` table. By default it lives in a SQLite
//! file beside the lock store; set `ACCOUNTS_URL=postgres://user:pw@host/db`
//! (and build with `--features sqlite,postgres`) to fence PostgreSQL writes.
//!
//! ```sh
//! cargo run --example fenced_write --features sqlite
//! ```

use std::time::Duration;

use sqlx::AnyPool;

/// Sets the balance if `token` is at least the highest token this row has
/// seen; returns whether the write was applied.
async fn fenced_update(
    db: &AnyPool,
    account: &str,
    balance: i64,
    token: u64,
) -> sqlx::Result<bool> {
    let token = i64::try_from(token).expect("tokens fit in a BIGINT");
    let done =
        sqlx::query("UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2")
            .bind(balance)
            .bind(token)
            .bind(account)
            .execute(db)
            .await?;
    Ok(done.rows_affected() == 1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("omnilock-example-fenced-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = format!("sqlite://{}/locks.db?ttl=5s", dir.display());
    let accounts_url = std::env::var("ACCOUNTS_URL")
        .unwrap_or_else(|_| format!("sqlite://{}/accounts.db?mode=rwc", dir.display()));

    sqlx::any::install_default_drivers();
    let db = AnyPool::connect(&accounts_url).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS accounts (id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL)")
        .execute(&db)
        .await?;
    sqlx::query("DELETE FROM accounts WHERE id = 'acme'")
        .execute(&db)
        .await?;
    sqlx::query("INSERT INTO accounts (id, balance, fence) VALUES ('acme', 100, 0)")
        .execute(&db)
        .await?;

    // Two workers, each with its own connection to the lock store.
    let worker_a = omnilock::connect(&store).await?;
    let worker_b = omnilock::connect(&store).await?;
    let name = "accounts/acme";

    let a = worker_a
        .lock(name)
        .timeout(Duration::from_secs(10))
        .acquire()
        .await?;
    println!("A holds {name} with token {}", a.token());

    // A stalls. Its lease ends: here an operator breaks the lock, standing in
    // for a pause longer than the TTL. A's renewal notices and `lost()` fires,
    // but A is not looking.
    worker_b.break_lock(name).await?;
    let b = worker_b
        .lock(name)
        .timeout(Duration::from_secs(10))
        .acquire()
        .await?;
    println!("B holds {name} with token {}", b.token());
    assert!(
        fenced_update(&db, "acme", 150, b.token()).await?,
        "B's write is applied"
    );
    println!("B wrote balance 150 with token {}", b.token());

    // A wakes up and writes with its old token: the database refuses it.
    let applied = fenced_update(&db, "acme", 40, a.token()).await?;
    println!(
        "A's stale write with token {}: {}",
        a.token(),
        if applied { "APPLIED" } else { "refused" }
    );
    assert!(
        !applied,
        "a stale token must not overwrite the newer holder's write"
    );

    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 'acme'")
        .fetch_one(&db)
        .await?;
    assert_eq!(balance, 150);
    println!("balance is {balance}: the newer holder's write stands");

    b.release().await?;
    drop(a); // A's guard knows it lost the lock; dropping it deletes nothing of B's.
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
