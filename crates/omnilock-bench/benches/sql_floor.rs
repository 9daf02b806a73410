//! SQL stores: omnilock's acquire + release against the raw floor its
//! algorithm needs (one INSERT + one DELETE on a keyed table), measured in the
//! same run over the same kind of connection pool; and the hand-off latency
//! from a holder's release to a waiter's grant, polling vs PostgreSQL
//! LISTEN/NOTIFY.
//!
//! Stores come from `OMNILOCK_TEST_{SQLITE,MYSQL,POSTGRES}_URL` (`scripts/stores.sh up`,
//! then `source target/stores/env`):
//!
//! ```sh
//! cargo bench -p omnilock-bench --bench sql_floor
//! ```
//!
//! Times drift on a shared machine; read the ratios, which compare numbers
//! taken in interleaved batches of the same run.

use std::time::{Duration, Instant};

#[path = "common/mod.rs"]
mod common;

use common::{batches, iterations, ms, percentile, try_round};
use sqlx::{AssertSqlSafe, Executor, SqlSafeStr};

const STORES: &[&str] = &["SQLITE", "MYSQL", "POSTGRES"];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations = iterations(2000);
    println!(
        "| store | floor INSERT+DELETE p50 / p99 | omnilock same name p50 / p99 | ratio p50 | omnilock new names p50 / p99 | ratio p50 |"
    );
    println!("|---|---|---|---|---|---|");
    let mut found = Vec::new();
    for store in STORES {
        let Ok(url) = std::env::var(format!("OMNILOCK_TEST_{store}_URL")) else {
            eprintln!("{store}: OMNILOCK_TEST_{store}_URL not set; skipped");
            continue;
        };
        uncontended(store, &url, iterations).await;
        found.push((*store, url));
    }
    println!();
    println!("Advisory mode (`?mode=advisory`):");
    println!();
    println!(
        "| store | floor lock+unlock p50 / p99 | omnilock same name p50 / p99 | ratio p50 | omnilock new names p50 / p99 | ratio p50 |"
    );
    println!("|---|---|---|---|---|---|");
    for (store, url) in &found {
        if *store != "SQLITE" {
            uncontended_advisory(store, url, iterations).await;
        }
    }
    println!();
    println!("| store | hand-off p50 | p99 | waiters woken by |");
    println!("|---|---|---|---|");
    for (store, url) in &found {
        if *store != "SQLITE" {
            handoff(store, &advisory(url), "the database (advisory mode)").await;
        }
        let how = if *store == "POSTGRES" {
            "NOTIFY"
        } else {
            "polling"
        };
        handoff(store, url, how).await;
        if *store == "POSTGRES" {
            handoff(store, &with_option(url, "notify=false"), "polling").await;
        }
    }
}

/// The store's URL in advisory mode, on a table of its own.
fn advisory(url: &str) -> String {
    with_option(url, "mode=advisory&table=omnilock_bench_advisory")
}

fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// The floor's pool: the dialect's own sqlx driver, as omnilock uses.
enum RawPool {
    Sqlite(sqlx::SqlitePool),
    MySql(sqlx::MySqlPool),
    Postgres(sqlx::PgPool),
}

/// Runs `$body` with `$p` bound to the dialect's pool.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            RawPool::Sqlite($p) => $body,
            RawPool::MySql($p) => $body,
            RawPool::Postgres($p) => $body,
        }
    };
}

/// The floor's pool of `connections` (SQLite: 4).
async fn raw_pool(store: &str, url: &str, connections: u32) -> RawPool {
    match store {
        "SQLITE" => RawPool::Sqlite(
            sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(4)
                // The same settings omnilock's SQLite store uses.
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        for pragma in omnilock::sql::SQLITE_PRAGMAS {
                            conn.execute(*pragma).await?;
                        }
                        Ok(())
                    })
                })
                .connect(&format!("{url}?mode=rwc"))
                .await
                .expect("raw pool"),
        ),
        "MYSQL" => RawPool::MySql(
            sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(connections)
                .connect(url)
                .await
                .expect("raw pool"),
        ),
        _ => RawPool::Postgres(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(connections)
                .connect(url)
                .await
                .expect("raw pool"),
        ),
    }
}

async fn uncontended(store: &str, url: &str, iterations: usize) {
    let pool = raw_pool(store, url, 8).await;
    let (text, placeholder) = match store {
        "SQLITE" => ("TEXT", ["?1", "?2"]),
        "MYSQL" => ("VARCHAR(256)", ["?", "?"]),
        _ => ("VARCHAR(256)", ["$1", "$2"]),
    };
    on_pool!(&pool, p => {
        p.execute("DROP TABLE IF EXISTS omnilock_floor").await.expect("drop");
        p.execute(AssertSqlSafe(format!(
            "CREATE TABLE omnilock_floor (name {text} NOT NULL PRIMARY KEY, owner {text} NOT NULL)"
        )))
        .await
        .expect("floor table");
    });
    let insert = format!(
        "INSERT INTO omnilock_floor (name, owner) VALUES ({}, {})",
        placeholder[0], placeholder[1]
    );
    let delete = format!(
        "DELETE FROM omnilock_floor WHERE name = {} AND owner = {}",
        placeholder[0], placeholder[1]
    );
    let [insert, delete] =
        [insert, delete].map(|sql| AssertSqlSafe(std::sync::Arc::<str>::from(sql)).into_sql_str());
    let locks = omnilock::connect(url).await.expect("omnilock");
    let mut samples = Samples::default();
    for (batch, warmup, per_batch) in batches(iterations) {
        let mut floor = Vec::new();
        for _ in 0..per_batch {
            let started = Instant::now();
            on_pool!(&pool, p => {
                for statement in [&insert, &delete] {
                    sqlx::query(statement.clone())
                        .bind("bench")
                        .bind("me")
                        .execute(p)
                        .await
                        .expect("floor statement");
                }
            });
            floor.push(started.elapsed());
        }
        samples.add(&locks, floor, batch, warmup).await;
    }
    samples.print_row(store);
}

/// The advisory floor: the database's own lock and unlock on one
/// connection (`GET_LOCK`/`RELEASE_LOCK`, `pg_try_advisory_lock`/
/// `pg_advisory_unlock`), against omnilock's advisory mode, which also bumps
/// the fencing token in the statement that takes the lock.
async fn uncontended_advisory(store: &str, url: &str, iterations: usize) {
    // One connection: these locks belong to a session.
    let pool = raw_pool(store, url, 1).await;
    let [lock, unlock] = match store {
        "MYSQL" => [
            "SELECT GET_LOCK('omnilock-bench-floor', 0)",
            "SELECT RELEASE_LOCK('omnilock-bench-floor')",
        ],
        _ => [
            "SELECT pg_try_advisory_lock(4242)",
            "SELECT pg_advisory_unlock(4242)",
        ],
    };
    let locks = omnilock::connect(&advisory(url)).await.expect("omnilock");
    let mut samples = Samples::default();
    for (batch, warmup, per_batch) in batches(iterations) {
        let mut floor = Vec::new();
        // Checked out once per batch: omnilock's sessions are not pooled
        // either, so neither side pays a pool checkout per statement.
        on_pool!(&pool, p => {
            let mut conn = p.acquire().await.expect("connection");
            for _ in 0..per_batch {
                let started = Instant::now();
                for statement in [lock, unlock] {
                    sqlx::query(statement).execute(&mut *conn).await.expect("floor statement");
                }
                floor.push(started.elapsed());
            }
        });
        samples.add(&locks, floor, batch, warmup).await;
    }
    samples.print_row(store);
}

/// The samples of one comparison: the floor's, and omnilock's on one name
/// and on fresh names.
#[derive(Default)]
struct Samples {
    floor: Vec<Duration>,
    same: Vec<Duration>,
    fresh: Vec<Duration>,
}

impl Samples {
    /// After a batch of the floor (its `floor` samples), one batch of as
    /// many omnilock rounds on one name, then on fresh names (an insert of
    /// the row instead of an update); all kept unless `warmup`.
    async fn add(
        &mut self,
        locks: &omnilock::Locks,
        floor: Vec<Duration>,
        batch: usize,
        warmup: bool,
    ) {
        let run_id = std::process::id();
        let (mut same, mut fresh) = (Vec::new(), Vec::new());
        for _ in 0..floor.len() {
            let started = Instant::now();
            try_round(locks, "bench/same").await;
            same.push(started.elapsed());
        }
        for i in 0..floor.len() {
            let name = format!("bench/{run_id}/{batch}/{i}");
            let started = Instant::now();
            try_round(locks, &name).await;
            fresh.push(started.elapsed());
        }
        if !warmup {
            self.floor.extend(floor);
            self.same.extend(same);
            self.fresh.extend(fresh);
        }
    }

    /// One table row: the floor, then omnilock on one name and on fresh
    /// names, each with its p50 over the floor's.
    fn print_row(mut self, store: &str) {
        for samples in [&mut self.floor, &mut self.same, &mut self.fresh] {
            samples.sort();
        }
        let floor = &self.floor;
        let ratio = |s: &[Duration]| {
            percentile(s, 0.5).as_secs_f64() / percentile(floor, 0.5).as_secs_f64()
        };
        let (same, fresh) = (&self.same, &self.fresh);
        println!(
            "| {store} | {} / {} | {} / {} | {:.2}x | {} / {} | {:.2}x |",
            ms(percentile(floor, 0.5)),
            ms(percentile(floor, 0.99)),
            ms(percentile(same, 0.5)),
            ms(percentile(same, 0.99)),
            ratio(same),
            ms(percentile(fresh, 0.5)),
            ms(percentile(fresh, 0.99)),
            ratio(fresh),
        );
    }
}

/// From the holder's release call to the waiter's grant, the waiter being a
/// separate client (its own pool, and on PostgreSQL its own listener).
async fn handoff(store: &str, url: &str, how: &str) {
    let holder = omnilock::connect(url).await.expect("holder");
    let waiter = omnilock::connect(url).await.expect("waiter");
    let mut samples = Vec::new();
    for round in 0..120 {
        let guard = holder
            .acquire("bench/handoff")
            .await
            .expect("holder acquires");
        let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
        let waiter = waiter.clone();
        let task = tokio::spawn(async move {
            let guard = waiter
                .lock("bench/handoff")
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .acquire()
                .await
                .expect("waiter acquires");
            let granted = Instant::now();
            guard.release().await.expect("release");
            granted
        });
        queued_rx.await.expect("waiter waits");
        // Release at a random point of the waiter's poll cycle.
        tokio::time::sleep(Duration::from_millis(5 + (round * 7 % 50) as u64)).await;
        let released = Instant::now();
        guard.release().await.expect("holder releases");
        let granted = task.await.expect("waiter task");
        if round >= 20 {
            samples.push(granted.saturating_duration_since(released));
        }
    }
    samples.sort();
    println!(
        "| {store} | {} | {} | {how} |",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99))
    );
}
