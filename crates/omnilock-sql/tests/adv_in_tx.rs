//! SCRATCH adversarial tests for try_lock_in / lock_in. Delete after use.
#![allow(unused, clippy::all)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, Locks};
use omnilock_sql::SqlStore;
use omnilock_testkit::store_url;

use common::{connect, unique, with_option};

macro_rules! each_db {
    ($kind:ident, $url:ident, $pool:ident, $body:block) => {
        each_db!(@ $kind, $url, $pool, $body, 40);
    };
    (@ $kind:ident, $url:ident, $pool:ident, $body:block, $max:expr) => {
        if let Some($url) = store_url("POSTGRES") {
            if std::env::var("ONLY").map(|o| o == "POSTGRES").unwrap_or(true) {
            let $kind = "POSTGRES";
            let $pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections($max)
                .acquire_timeout(Duration::from_secs(5))
                .connect(&$url)
                .await
                .unwrap();
            $body
            }
        }
        if let Some($url) = store_url("MYSQL") {
            if std::env::var("ONLY").map(|o| o == "MYSQL").unwrap_or(true) {
            let $kind = "MYSQL";
            let $pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections($max)
                .acquire_timeout(Duration::from_secs(5))
                .connect(&$url)
                .await
                .unwrap();
            $body
            }
        }
        if let Some($url) = store_url("SQLITE") {
            if std::env::var("ONLY").map(|o| o == "SQLITE").unwrap_or(true) {
            let $kind = "SQLITE";
            let base = $url.split('?').next().unwrap().to_string();
            let $pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections($max)
                .acquire_timeout(Duration::from_secs(5))
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        use sqlx::Executor;
                        for pragma in omnilock_sql::SQLITE_PRAGMAS {
                            conn.execute(*pragma).await?;
                        }
                        Ok(())
                    })
                })
                .connect(&format!("{base}?mode=rwc"))
                .await
                .unwrap();
            $body
            }
        }
    };
}

macro_rules! exec {
    ($e:expr, $sql:expr) => {
        sqlx::query(sqlx::AssertSqlSafe($sql.to_string()))
            .execute($e)
            .await
    };
}

macro_rules! store {
    ($pool:expr, $table:expr) => {
        SqlStore::builder($pool.clone())
            .table(&$table)
            .build_store()
            .await
            .expect("store")
    };
}

macro_rules! token_row {
    ($pool:expr, $table:expr, $name:expr) => {{
        let r: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT token FROM {} WHERE name = '{}'",
            $table, $name
        )))
        .fetch_optional(&$pool)
        .await
        .unwrap();
        r.map(|r| r.0)
    }};
}

fn ek(e: &omnilock_core::Error) -> String {
    format!("{:?}: {}", e.kind(), e)
}

// ---------------------------------------------------------------- Q1
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q1_exclusion() {
    each_db!(kind, url, pool, {
        let t0 = Instant::now();
        let table = unique("adv_locks");
        let ctr = unique("adv_ctr");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        exec!(&pool, format!("CREATE TABLE {ctr} (id INTEGER PRIMARY KEY, v BIGINT NOT NULL, last_token BIGINT NOT NULL)")).unwrap();
        exec!(&pool, format!("INSERT INTO {ctr} VALUES (1, 0, 0)")).unwrap();
        let name = unique("excl");
        let flag = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicU64::new(0));
        let nonmono = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (pool, store, name, ctr, flag, overlaps, nonmono, errors, done) = (
                pool.clone(),
                store.clone(),
                name.clone(),
                ctr.clone(),
                flag.clone(),
                overlaps.clone(),
                nonmono.clone(),
                errors.clone(),
                done.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let mut tx = pool.begin().await.unwrap();
                    let lock = match store
                        .lock_in(&mut *tx, &name, Duration::from_secs(30))
                        .await
                    {
                        Ok(l) => l,
                        Err(e) => {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("tx lock_in: {}", ek(&e)));
                            continue;
                        }
                    };
                    if flag.swap(true, SeqCst) {
                        overlaps.fetch_add(1, SeqCst);
                    }
                    let (v, last): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                        "SELECT v, last_token FROM {ctr} WHERE id = 1"
                    )))
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                    if last >= lock.token() as i64 {
                        nonmono.fetch_add(1, SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    exec!(
                        &mut *tx,
                        format!(
                            "UPDATE {ctr} SET v = {}, last_token = {} WHERE id = 1",
                            v + 1,
                            lock.token()
                        )
                    )
                    .unwrap();
                    flag.store(false, SeqCst);
                    match tx.commit().await {
                        Ok(()) => {
                            done.fetch_add(1, SeqCst);
                        }
                        Err(e) => errors.lock().unwrap().push(format!("tx commit: {e}")),
                    }
                }
            }));
        }
        for _ in 0..4 {
            let (pool, session, name, ctr, flag, overlaps, nonmono, errors, done) = (
                pool.clone(),
                session.clone(),
                name.clone(),
                ctr.clone(),
                flag.clone(),
                overlaps.clone(),
                nonmono.clone(),
                errors.clone(),
                done.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let g = match session
                        .lock(&name)
                        .timeout(Duration::from_secs(30))
                        .acquire()
                        .await
                    {
                        Ok(g) => g,
                        Err(e) => {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("session acquire: {}", ek(&e)));
                            continue;
                        }
                    };
                    if flag.swap(true, SeqCst) {
                        overlaps.fetch_add(1, SeqCst);
                    }
                    let (v, last): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                        "SELECT v, last_token FROM {ctr} WHERE id = 1"
                    )))
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                    if last >= g.token() as i64 {
                        nonmono.fetch_add(1, SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    if let Err(e) = exec!(
                        &pool,
                        format!(
                            "UPDATE {ctr} SET v = {}, last_token = {} WHERE id = 1",
                            v + 1,
                            g.token()
                        )
                    ) {
                        errors.lock().unwrap().push(format!("session update: {e}"));
                    }
                    flag.store(false, SeqCst);
                    if let Err(e) = g.release().await {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("session release: {}", ek(&e)));
                    }
                    done.fetch_add(1, SeqCst);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let (v, last): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT v, last_token FROM {ctr} WHERE id = 1"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        let errs = errors.lock().unwrap().clone();
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for e in &errs {
            *counts.entry(e.chars().take(160).collect()).or_default() += 1;
        }
        println!(
            "Q1 {kind}: sections done={} counter={} last_token={} row_token={:?} overlaps={} nonmonotone={} errors={} {:?} in {:?}",
            done.load(SeqCst),
            v,
            last,
            token_row!(pool, table, name),
            overlaps.load(SeqCst),
            nonmono.load(SeqCst),
            errs.len(),
            counts,
            t0.elapsed()
        );
    });
}

// ---------------------------------------------------------------- Q2a
/// try_lock_in / lock_in(short timeout) against a lock held by another
/// transaction's lock_in, and a session try_acquire against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q2a_blocking() {
    each_db!(kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        let name = unique("blk");
        // create row first
        session
            .acquire(&name)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let mut a = pool.begin().await.unwrap();
        let la = store
            .lock_in(&mut *a, &name, Duration::from_secs(5))
            .await
            .unwrap();
        let hold = Duration::from_secs(3);
        let committer = tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            a.commit().await.unwrap();
        });
        let mut b = pool.begin().await.unwrap();
        let t = Instant::now();
        let r = store.try_lock_in(&mut *b, &name).await;
        println!(
            "Q2a {kind}: try_lock_in vs in-tx holder (held {hold:?}) -> {:?} after {:?} (holder token {})",
            r.as_ref()
                .map(|o| o.as_ref().map(|l| l.token()))
                .map_err(ek),
            t.elapsed(),
            la.token()
        );
        drop(b);
        committer.await.unwrap();

        // lock_in with 200ms timeout against in-tx holder held 3 s
        let mut a = pool.begin().await.unwrap();
        store
            .lock_in(&mut *a, &name, Duration::from_secs(5))
            .await
            .unwrap();
        let committer = tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            a.rollback().await.unwrap();
        });
        let mut b = pool.begin().await.unwrap();
        let t = Instant::now();
        let r = store
            .lock_in(&mut *b, &name, Duration::from_millis(200))
            .await;
        println!(
            "Q2a {kind}: lock_in(200ms) vs in-tx holder (held {hold:?}) -> {:?} after {:?}",
            r.as_ref().map(|l| l.token()).map_err(ek),
            t.elapsed()
        );
        drop(b);
        committer.await.unwrap();

        // session try_acquire and timeout(200ms) acquire against in-tx holder held 7 s
        let mut a = pool.begin().await.unwrap();
        store
            .lock_in(&mut *a, &name, Duration::from_secs(5))
            .await
            .unwrap();
        let hold7 = Duration::from_secs(7);
        let committer = tokio::spawn(async move {
            tokio::time::sleep(hold7).await;
            a.commit().await.unwrap();
        });
        let t = Instant::now();
        let r = session.try_acquire(&name).await;
        println!(
            "Q2a {kind}: session try_acquire vs in-tx holder (held {hold7:?}) -> {:?} after {:?}",
            r.as_ref()
                .map(|o| o.as_ref().map(|g| g.token()))
                .map_err(ek),
            t.elapsed()
        );
        if let Ok(Some(g)) = r {
            g.release().await.unwrap();
        }
        committer.await.unwrap();
    });
}

// ---------------------------------------------------------------- Q2b
/// Race: a session holder cycles acquire/release; a tx task does
/// try_lock_in; on None it keeps the tx open 300 ms. Count holder
/// releases/acquires slower than 150 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q2b_race() {
    each_db!(kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        let name = unique("race");
        session
            .acquire(&name)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let slow = Arc::new(AtomicU64::new(0));
        let max_ms = Arc::new(AtomicU64::new(0));
        let cycles = Arc::new(AtomicU64::new(0));
        let mut holders = Vec::new();
        for _ in 0..2 {
            let (session, name, stop, slow, max_ms, cycles) = (
                session.clone(),
                name.clone(),
                stop.clone(),
                slow.clone(),
                max_ms.clone(),
                cycles.clone(),
            );
            holders.push(tokio::spawn(async move {
                while !stop.load(SeqCst) {
                    let g = match session.try_acquire(&name).await {
                        Ok(Some(g)) => g,
                        Ok(None) => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            continue;
                        }
                        Err(e) => {
                            println!("holder acquire err {}", ek(&e));
                            continue;
                        }
                    };
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let t = Instant::now();
                    g.release().await.unwrap();
                    let ms = t.elapsed().as_millis() as u64;
                    max_ms.fetch_max(ms, SeqCst);
                    if ms > 150 {
                        slow.fetch_add(1, SeqCst);
                    }
                    cycles.fetch_add(1, SeqCst);
                }
            }));
        }
        let (mut some, mut none, mut errs, mut busy_tx_slow) = (0, 0, 0, 0);
        let t0 = Instant::now();
        for _ in 0..150 {
            let mut tx = pool.begin().await.unwrap();
            let t = Instant::now();
            match store.try_lock_in(&mut *tx, &name).await {
                Ok(Some(_)) => {
                    some += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = tx.commit().await;
                }
                Ok(None) => {
                    none += 1;
                    if t.elapsed() > Duration::from_millis(100) {
                        busy_tx_slow += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let _ = tx.rollback().await;
                }
                Err(e) => {
                    errs += 1;
                    println!("Q2b {kind} err {}", ek(&e));
                    let _ = tx.rollback().await;
                }
            }
        }
        stop.store(true, SeqCst);
        for h in holders {
            h.await.unwrap();
        }
        println!(
            "Q2b {kind}: try_lock_in some={some} none={none} err={errs} slow_try(>100ms)={busy_tx_slow}; holder release cycles={} slow(>150ms)={} max={}ms in {:?}",
            cycles.load(SeqCst),
            slow.load(SeqCst),
            max_ms.load(SeqCst),
            t0.elapsed()
        );
    });
}

// ---------------------------------------------------------------- Q3
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q3_odd_input() {
    each_db!(kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        let names: Vec<(&str, String)> = vec![
            ("256 ascii", "n".repeat(256)),
            ("257 ascii", "n".repeat(257)),
            ("128 x é (256 bytes)", "é".repeat(128)),
            ("64 x emoji (256B)", "😀".repeat(64)),
            ("quotes", "a'b\"c`d;-- DROP".to_string()),
            ("backslash", "a\\b\\'".to_string()),
            ("NUL", "a\0b".to_string()),
            ("trailing space", "abc ".to_string()),
            ("case", "ABC".to_string()),
        ];
        for (label, n) in &names {
            let mut tx = pool.begin().await.unwrap();
            let r = store.try_lock_in(&mut *tx, n).await;
            let tok = match &r {
                Ok(Some(l)) => Some(l.token()),
                _ => None,
            };
            let c = tx.commit().await;
            let s = session.try_acquire(n).await;
            println!(
                "Q3 {kind} name {label}: try_lock_in -> {:?}; commit {:?}; session try_acquire after -> {:?}",
                r.as_ref()
                    .map(|o| o.as_ref().map(|l| l.token()))
                    .map_err(ek),
                c.as_ref().err().map(|e| e.to_string()),
                s.as_ref()
                    .map(|o| o.as_ref().map(|g| g.token()))
                    .map_err(ek)
            );
            if let Ok(Some(g)) = s {
                g.release().await.unwrap();
            }
        }
        // 'abc' vs 'abc ' and 'ABC' vs 'abc' collisions (MySQL PAD / collation)
        {
            let g = session.acquire("abc").await.unwrap();
            let mut tx = pool.begin().await.unwrap();
            let r1 = store.try_lock_in(&mut *tx, "abc ").await;
            let r2 = store.try_lock_in(&mut *tx, "Abc").await;
            println!(
                "Q3 {kind}: session holds 'abc'; try_lock_in 'abc ' -> {:?}, 'Abc' -> {:?}",
                r1.as_ref()
                    .map(|o| o.as_ref().map(|l| l.token()))
                    .map_err(ek),
                r2.as_ref()
                    .map(|o| o.as_ref().map(|l| l.token()))
                    .map_err(ek)
            );
            drop(tx);
            g.release().await.unwrap();
        }
        // zero timeout: free, then held
        let name = unique("zero");
        let mut tx = pool.begin().await.unwrap();
        let r = store.lock_in(&mut *tx, &name, Duration::ZERO).await;
        println!(
            "Q3 {kind}: lock_in(ZERO) free -> {:?}",
            r.as_ref().map(|l| l.token()).map_err(ek)
        );
        tx.commit().await.unwrap();
        let g = session.acquire(&name).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let t = Instant::now();
        let r = store.lock_in(&mut *tx, &name, Duration::ZERO).await;
        println!(
            "Q3 {kind}: lock_in(ZERO) held -> {:?} after {:?}",
            r.as_ref().map(|l| l.token()).map_err(ek),
            t.elapsed()
        );
        // MAX timeout on held, release after 300ms
        let rel = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            g.release().await.unwrap();
        });
        let t = Instant::now();
        let r = store.lock_in(&mut *tx, &name, Duration::MAX).await;
        println!(
            "Q3 {kind}: lock_in(MAX) held then released -> {:?} after {:?}",
            r.as_ref().map(|l| l.token()).map_err(ek),
            t.elapsed()
        );
        rel.await.unwrap();
        let r2 = store.lock_in(&mut *tx, &name, Duration::MAX).await;
        println!(
            "Q3 {kind}: second lock_in same tx same name -> {:?}",
            r2.as_ref().map(|l| l.token()).map_err(ek)
        );
        let r3 = store.try_lock_in(&mut *tx, &name).await;
        println!(
            "Q3 {kind}: third (try) same tx same name -> {:?}",
            r3.as_ref()
                .map(|o| o.as_ref().map(|l| l.token()))
                .map_err(ek)
        );
        tx.commit().await.unwrap();
        println!(
            "Q3 {kind}: row token after commit {:?}",
            token_row!(pool, table, name)
        );
        // second lock_in from a different tx while first tx holds (same process)
        // session holder (store built on same pool, i.e. same "owner" process) then lock_in
        let locks_same = SqlStore::builder(pool.clone())
            .table(&table)
            .build()
            .await
            .unwrap();
        let g = locks_same.acquire(&name).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let r = store.try_lock_in(&mut *tx, &name).await;
        println!(
            "Q3 {kind}: same-process session guard held; try_lock_in -> {:?}",
            r.as_ref()
                .map(|o| o.as_ref().map(|l| l.token()))
                .map_err(ek)
        );
        drop(tx);
        g.release().await.unwrap();
        // in-tx then session same process, reentrant request
        let mut tx = pool.begin().await.unwrap();
        let l = store
            .lock_in(&mut *tx, &name, Duration::from_secs(1))
            .await
            .unwrap();
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(8), locks_same.try_acquire(&name)).await;
        println!(
            "Q3 {kind}: in-tx held (token {}); same-process session try_acquire -> {:?} after {:?}",
            l.token(),
            r.as_ref().map(|r| r
                .as_ref()
                .map(|o| o.as_ref().map(|g| g.token()))
                .map_err(ek)),
            t.elapsed()
        );
        drop(tx);
    });
}

// ---------------------------------------------------------------- Q3b other DB kind / other DB
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q3b_wrong_db() {
    let pg = store_url("POSTGRES").unwrap();
    let my = store_url("MYSQL").unwrap();
    let pgpool = sqlx::PgPool::connect(&pg).await.unwrap();
    let mypool = sqlx::MySqlPool::connect(&my).await.unwrap();
    let table = unique("adv_locks");
    let pgstore = store!(pgpool, table);
    let mut tx = mypool.begin().await.unwrap();
    let r = pgstore.try_lock_in(&mut *tx, "x").await;
    println!(
        "Q3b PG store + MySQL tx -> {:?}",
        r.map(|o| o.map(|l| l.token())).map_err(|e| ek(&e))
    );
    // Two SQLite files, both with the lock table: store on A, tx on B.
    let dir = std::path::PathBuf::from("/work/main/target/adv");
    std::fs::create_dir_all(&dir).unwrap();
    let a = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}/a_{}.db?mode=rwc",
        dir.display(),
        std::process::id()
    ))
    .await
    .unwrap();
    let b = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}/b_{}.db?mode=rwc",
        dir.display(),
        std::process::id()
    ))
    .await
    .unwrap();
    let lt = String::from("locks");
    let sa = store!(a, lt);
    let _sb = store!(b, lt);
    let la = SqlStore::builder(a.clone())
        .table("locks")
        .build()
        .await
        .unwrap();
    let mut tx = b.begin().await.unwrap();
    let r = sa.try_lock_in(&mut *tx, "shared").await;
    let other = la.try_acquire("shared").await;
    println!(
        "Q3b SQLite store on A, tx on B (both have table): try_lock_in -> {:?}; while tx open, session on A try_acquire -> {:?}",
        r.map(|o| o.map(|l| l.token())).map_err(|e| ek(&e)),
        other
            .as_ref()
            .map(|o| o.as_ref().map(|g| g.token()))
            .map_err(ek)
    );
    drop(tx);
    // PG: tx on a connection whose search_path points at a schema with its own copy of the table
    let schema = unique("advs");
    exec!(&pgpool, format!("CREATE SCHEMA {schema}")).unwrap();
    exec!(
        &pgpool,
        format!("CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING ALL)")
    )
    .unwrap();
    let mut tx = pgpool.begin().await.unwrap();
    exec!(&mut *tx, format!("SET LOCAL search_path = {schema}")).unwrap();
    let r = pgstore.try_lock_in(&mut *tx, "shared").await;
    let pglocks = SqlStore::builder(pgpool.clone())
        .table(&table)
        .build()
        .await
        .unwrap();
    let other = tokio::time::timeout(Duration::from_secs(3), pglocks.try_acquire("shared")).await;
    println!(
        "Q3b PG tx with search_path to other schema: try_lock_in -> {:?}; session try_acquire while open -> {:?}",
        r.map(|o| o.map(|l| l.token())).map_err(|e| ek(&e)),
        other.map(|r| r.map(|o| o.map(|g| g.token())).map_err(|e| ek(&e)))
    );
    drop(tx);
    exec!(&pgpool, format!("DROP SCHEMA {schema} CASCADE")).unwrap();

    // Aborted PG transaction
    let mut tx = pgpool.begin().await.unwrap();
    let _ = exec!(&mut *tx, "SELECT 1/0");
    let r = pgstore.try_lock_in(&mut *tx, "aborted").await;
    println!(
        "Q3b PG aborted tx: try_lock_in -> {:?}",
        r.map(|o| o.map(|l| l.token())).map_err(|e| ek(&e))
    );
    let r = pgstore
        .lock_in(&mut *tx, "aborted", Duration::from_secs(2))
        .await;
    println!(
        "Q3b PG aborted tx: lock_in -> {:?}",
        r.map(|l| l.token()).map_err(|e| ek(&e))
    );
    drop(tx);
    // No transaction at all: a plain pooled connection (autocommit)
    let mut c = pgpool.acquire().await.unwrap();
    let r = pgstore.try_lock_in(&mut *c, "autocommit").await;
    let other = pglocks.try_acquire("autocommit").await;
    println!(
        "Q3b PG no tx (plain conn): try_lock_in -> {:?}; session try_acquire right after -> {:?}",
        r.map(|o| o.map(|l| l.token())).map_err(|e| ek(&e)),
        other
            .as_ref()
            .map(|o| o.as_ref().map(|g| g.token()))
            .map_err(ek)
    );
}

// ---------------------------------------------------------------- Q3c SQLite: tx that already wrote
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q3c_sqlite_wrote_then_wait() {
    each_db!(kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}&ttl=3s")))
            .await
            .unwrap();
        let a = unique("a");
        let b = unique("b");
        let g = session.acquire(&b).await.unwrap();
        let gt = g.token();
        let mut tx = pool.begin().await.unwrap();
        store
            .lock_in(&mut *tx, &a, Duration::from_secs(1))
            .await
            .unwrap();
        let rel = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let t = Instant::now();
            let r = g.release().await;
            (r.map_err(|e| ek(&e)), t.elapsed())
        });
        let t = Instant::now();
        let r = store.lock_in(&mut *tx, &b, Duration::from_secs(20)).await;
        let el = t.elapsed();
        let rr = rel.await.unwrap();
        println!(
            "Q3c {kind}: tx holds in-tx A, lock_in B (session holds B tok {gt}, releases after 300ms): -> {:?} after {:?}; holder release -> {:?}",
            r.map(|l| l.token()).map_err(|e| ek(&e)),
            el,
            rr
        );
        drop(tx);
    });
}

// ---------------------------------------------------------------- Q3d pool exhaustion
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q3d_pool_exhaustion() {
    each_db!(@ kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let t = Instant::now();
        let mut tasks = Vec::new();
        let barrier = Arc::new(tokio::sync::Barrier::new(4));
        for i in 0..4 {
            let (pool, store, table, barrier) = (pool.clone(), store.clone(), table.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                barrier.wait().await;
                let r = store.lock_in(&mut *tx, &format!("distinct{i}"), Duration::from_secs(30)).await;
                let _ = tx.commit().await;
                r.map(|l| l.token()).map_err(|e| ek(&e))
            }));
        }
        let mut out = Vec::new();
        for t in tasks { out.push(t.await.unwrap()); }
        println!("Q3d {kind}: pool max 4, 4 tasks begin+lock_in distinct free names -> {:?} in {:?}", out, t.elapsed());
    }, 4);
}

// ---------------------------------------------------------------- Q4 drop future
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q4_drop_future() {
    each_db!(kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        let name = unique("drop");
        // (a) dropped during poll sleep (session holder)
        let g = session.acquire(&name).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let r = tokio::time::timeout(
            Duration::from_millis(300),
            store.lock_in(&mut *tx, &name, Duration::from_secs(30)),
        )
        .await;
        let ok = exec!(&mut *tx, "SELECT 1").is_ok();
        tx.commit().await.unwrap();
        let t = Instant::now();
        g.release().await.unwrap();
        println!(
            "Q4 {kind} (a) dropped while polling: timed_out={} tx usable={ok}; holder release took {:?}; pool size={} idle={}",
            r.is_err(),
            t.elapsed(),
            pool.size(),
            pool.num_idle()
        );
        // (b) dropped while blocked in the DB on another tx's row lock
        let before = token_row!(pool, table, name);
        let mut holder = pool.begin().await.unwrap();
        let h = store
            .lock_in(&mut *holder, &name, Duration::from_secs(5))
            .await
            .unwrap();
        let mut tx = pool.begin().await.unwrap();
        let r = tokio::time::timeout(
            Duration::from_millis(500),
            store.lock_in(&mut *tx, &name, Duration::from_secs(30)),
        )
        .await;
        println!(
            "Q4 {kind} (b) dropped while blocked in DB: timed_out={}",
            r.is_err()
        );
        holder.commit().await.unwrap();
        let t = Instant::now();
        let use_r =
            tokio::time::timeout(Duration::from_secs(10), sqlx::query("SELECT 1").execute(&mut *tx)).await;
        println!(
            "Q4 {kind} (b) after holder commit: next stmt on tx -> {:?} after {:?}",
            use_r.map(|r| r.map(|_| ()).map_err(|e| e.to_string())),
            t.elapsed()
        );
        let again =
            tokio::time::timeout(Duration::from_secs(5), store.try_lock_in(&mut *tx, &name)).await;
        println!(
            "Q4 {kind} (b) try_lock_in again in that tx -> {:?}",
            again.map(|r| r.map(|o| o.map(|l| l.token())).map_err(|e| ek(&e)))
        );
        let c = tokio::time::timeout(Duration::from_secs(10), tx.commit()).await;
        println!(
            "Q4 {kind} (b) commit -> {:?}; tokens: before {:?}, holder {}, after commit {:?}",
            c.map(|r| r.map_err(|e| e.to_string())),
            before,
            h.token(),
            token_row!(pool, table, name)
        );
        // (c) same but the tx is dropped (not committed) after the dropped future
        let mut holder = pool.begin().await.unwrap();
        store
            .lock_in(&mut *holder, &name, Duration::from_secs(5))
            .await
            .unwrap();
        let mut tx = pool.begin().await.unwrap();
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            store.lock_in(&mut *tx, &name, Duration::from_secs(30)),
        )
        .await;
        drop(tx);
        tokio::time::sleep(Duration::from_millis(200)).await;
        holder.commit().await.unwrap();
        let t = Instant::now();
        let s = tokio::time::timeout(Duration::from_secs(10), session.acquire(&name)).await;
        println!(
            "Q4 {kind} (c) tx dropped: session acquire after -> {:?} in {:?}; pool size={} idle={}",
            s.as_ref()
                .map(|r| r.as_ref().map(|g| g.token()).map_err(ek)),
            t.elapsed(),
            pool.size(),
            pool.num_idle()
        );
        if let Ok(Ok(g)) = s {
            g.release().await.unwrap();
        }
    });
}

// ---------------------------------------------------------------- Q5 isolation
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q5_isolation() {
    each_db!(kind, url, pool, {
        if kind == "SQLITE" {
            return;
        }
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        let name = unique("iso");
        session
            .acquire(&name)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        for level in ["REPEATABLE READ", "SERIALIZABLE"] {
            // (1) unchanged row
            let mut tx = pool.begin().await.unwrap();
            exec!(&mut *tx, format!("SET TRANSACTION ISOLATION LEVEL {level}")).ok();
            exec!(&mut *tx, "SELECT 1").unwrap();
            let r = store.lock_in(&mut *tx, &name, Duration::from_secs(2)).await;
            println!(
                "Q5 {kind} {level} unchanged row -> {:?}",
                r.as_ref().map(|l| l.token()).map_err(ek)
            );
            tx.commit().await.unwrap();
            // (2) row changed after snapshot
            let mut tx = pool.begin().await.unwrap();
            exec!(&mut *tx, format!("SET TRANSACTION ISOLATION LEVEL {level}")).ok();
            let _: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT token FROM {table} WHERE name = '{name}'"
            )))
            .fetch_optional(&mut *tx)
            .await
            .unwrap();
            session
                .acquire(&name)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            let r = store.lock_in(&mut *tx, &name, Duration::from_secs(2)).await;
            match &r {
                Ok(l) => println!(
                    "Q5 {kind} {level} changed-after-snapshot -> Ok({})",
                    l.token()
                ),
                Err(e) => println!(
                    "Q5 {kind} {level} changed-after-snapshot -> Err kind={:?} retryable={} msg={}",
                    e.kind(),
                    e.is_retryable(),
                    e
                ),
            }
            drop(tx);
            // (3) snapshot taken, then another in-tx holder commits while we wait in the DB
            let mut other = pool.begin().await.unwrap();
            store
                .lock_in(&mut *other, &name, Duration::from_secs(2))
                .await
                .unwrap();
            let mut tx = pool.begin().await.unwrap();
            exec!(&mut *tx, format!("SET TRANSACTION ISOLATION LEVEL {level}")).ok();
            exec!(&mut *tx, format!("SELECT COUNT(*) FROM {table}")).unwrap();
            let c = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                other.commit().await.unwrap();
            });
            let r = store.lock_in(&mut *tx, &name, Duration::from_secs(5)).await;
            c.await.unwrap();
            match &r {
                Ok(l) => println!("Q5 {kind} {level} waited-on-other-tx -> Ok({})", l.token()),
                Err(e) => println!(
                    "Q5 {kind} {level} waited-on-other-tx -> Err kind={:?} retryable={} msg={}",
                    e.kind(),
                    e.is_retryable(),
                    e
                ),
            }
            drop(tx);
        }
    });
}

// ---------------------------------------------------------------- Q6 rollback
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn q6_rollback() {
    each_db!(kind, url, pool, {
        let table = unique("adv_locks");
        let store = store!(pool, table);
        let session: Locks = connect(&with_option(&url, &format!("table={table}")))
            .await
            .unwrap();
        let name = unique("rb");
        // brand-new name, rolled back create
        let mut tx = pool.begin().await.unwrap();
        let l1 = store
            .lock_in(&mut *tx, &name, Duration::from_secs(2))
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        let row = token_row!(pool, table, name);
        let mut tx = pool.begin().await.unwrap();
        let l2 = store
            .lock_in(&mut *tx, &name, Duration::from_secs(2))
            .await
            .unwrap();
        drop(tx); // implicit rollback
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut tx = pool.begin().await.unwrap();
        let l3 = store
            .lock_in(&mut *tx, &name, Duration::from_secs(2))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let g = session.acquire(&name).await.unwrap();
        let gt = g.token();
        g.release().await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let l4 = store
            .lock_in(&mut *tx, &name, Duration::from_secs(2))
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        let g2 = session.acquire(&name).await.unwrap();
        println!(
            "Q6 {kind}: create+rollback tok {} (row after: {:?}); drop-rollback tok {}; commit tok {}; session {}; rollback tok {}; session after {}",
            l1.token(),
            row,
            l2.token(),
            l3.token(),
            gt,
            l4.token(),
            g2.token()
        );
        g2.release().await.unwrap();
        // rollback while a session acquirer waits in the DB
        let mut tx = pool.begin().await.unwrap();
        let l5 = store
            .lock_in(&mut *tx, &name, Duration::from_secs(2))
            .await
            .unwrap();
        let s2 = session.clone();
        let n2 = name.clone();
        let w = tokio::spawn(async move {
            s2.lock(&n2)
                .timeout(Duration::from_secs(20))
                .acquire()
                .await
                .map(|g| g.token())
                .map_err(|e| ek(&e))
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.rollback().await.unwrap();
        println!(
            "Q6 {kind}: in-tx tok {} rolled back while session waited -> session got {:?}",
            l5.token(),
            w.await.unwrap()
        );
    });
}
