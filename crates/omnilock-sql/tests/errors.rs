//! What a user sees when the store cannot be used: one line that names the
//! file or `host:port` and says why, at once (not after the connect
//! timeout), never the password; and nothing retried that retrying cannot
//! mend.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{connect, unique};
use omnilock_core::{Error, ErrorKind};
use sqlx::{Connection, Executor};

/// A fresh directory for this test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique(name));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// An error that came at once, in one line.
fn quick(err: &Error, started: Instant, what: &str) -> String {
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(1),
        "{what}: took {elapsed:?}: {err}"
    );
    let shown = err.to_string();
    assert!(!shown.contains('\n'), "{what}: more than one line: {shown}");
    shown
}

/// Makes a SQLite file read-only in a way that holds for root too: a file
/// format write version above 2 (byte 18 of the header) tells SQLite the
/// file comes from a newer SQLite that it may read but not write.
fn make_read_only(path: &Path) {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the database file");
    file.seek(SeekFrom::Start(18)).expect("seek");
    file.write_all(&[3]).expect("write the header");
}

/// A SQLite file that exists, with the lock tables and no WAL left over.
async fn database(dir: &Path) -> PathBuf {
    let path = dir.join("locks.db");
    let locks = connect(&sqlite_url(&path)).await.expect("create");
    let guard = locks.try_acquire("x").await.expect("try").expect("free");
    guard.release().await.expect("release");
    locks.close().await;
    // Every page back in the file itself, so that the header patched below
    // is the one SQLite reads.
    let mut conn = sqlx::SqliteConnection::connect(&format!("{}?mode=rw", sqlite_url(&path)))
        .await
        .expect("raw connection");
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        .await
        .expect("checkpoint");
    conn.close().await.expect("close");
    let wal = std::fs::metadata(dir.join("locks.db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "the WAL still holds pages");
    path
}

fn assert_read_only(err: &Error, path: &Path, started: Instant, what: &str) {
    let shown = quick(err, started, what);
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{what}: {shown}");
    assert!(!err.is_retryable(), "{what}: retryable: {shown}");
    assert!(
        shown.contains(&path.display().to_string()),
        "{what}: {shown}"
    );
    assert!(shown.contains("read-only"), "{what}: {shown}");
}

/// A read-only SQLite file fails at once, not as "pool timed out" after the
/// connect timeout, and an acquire waiting with a timeout does not retry it.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_sqlite_fails_at_once() {
    // Read-only before connecting.
    let dir = scratch("read_only");
    let path = database(&dir).await;
    make_read_only(&path);
    let started = Instant::now();
    let err = connect(&sqlite_url(&path))
        .await
        .expect_err("read-only file");
    assert_read_only(&err, &path, started, "connect");

    // Read-only after connecting: a waiting acquire fails at once.
    let dir = scratch("read_only_later");
    let path = database(&dir).await;
    let locks = connect(&sqlite_url(&path)).await.expect("connect");
    make_read_only(&path);
    let started = Instant::now();
    let err = locks
        .lock("x")
        .timeout(Duration::from_secs(10))
        .acquire()
        .await
        .expect_err("acquire on a read-only file");
    assert_read_only(&err, &path, started, "acquire");

    // Without write permission (does not hold for root, who writes anyway).
    let dir = scratch("read_only_mode");
    let path = database(&dir).await;
    set_mode(&path, 0o444);
    set_mode(&dir, 0o555);
    if std::fs::OpenOptions::new().write(true).open(&path).is_err() {
        let started = Instant::now();
        let err = connect(&sqlite_url(&path)).await.expect_err("mode 0444");
        let shown = quick(&err, started, "mode 0444");
        assert!(!err.is_retryable(), "{shown}");
        assert!(shown.contains(&path.display().to_string()), "{shown}");
    } else {
        eprintln!("running as root: chmod does not make a file read-only; skipped that case");
    }
    set_mode(&dir, 0o755);
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A SQLite file in a directory that does not exist: the message names the
/// directory, and the error is not retried.
#[tokio::test(flavor = "multi_thread")]
async fn missing_sqlite_directory_is_named_at_once() {
    let dir = scratch("missing").join("no").join("such");
    let path = dir.join("locks.db");
    let started = Instant::now();
    let err = connect(&sqlite_url(&path))
        .await
        .expect_err("missing directory");
    let shown = quick(&err, started, "missing directory");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{shown}");
    assert!(!err.is_retryable(), "{shown}");
    assert!(
        shown.contains(&format!("the directory {} does not exist", dir.display())),
        "{shown}"
    );
}

/// A file that is not a SQLite database says so, naming it, at once.
#[tokio::test(flavor = "multi_thread")]
async fn not_a_database_is_named_at_once() {
    let path = scratch("not_a_db").join("notes.txt");
    std::fs::write(
        &path,
        "these are not the pages you are looking for\n".repeat(200),
    )
    .expect("write");
    let started = Instant::now();
    let err = connect(&sqlite_url(&path))
        .await
        .expect_err("not a database");
    let shown = quick(&err, started, "not a database");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{shown}");
    assert!(
        shown.contains(&format!("{} is not a SQLite database", path.display())),
        "{shown}"
    );
}

/// Nothing listens there: the message says "refused" and names host:port,
/// at once (not after the 5 s connect timeout), without the password.
#[tokio::test(flavor = "multi_thread")]
async fn refused_connection_names_host_and_port() {
    for url in [
        "postgres://u:sekrit@127.0.0.1:1/db",
        "mysql://u:sekrit@127.0.0.1:1/db",
    ] {
        let started = Instant::now();
        let err = connect(url).await.expect_err("nothing listens on port 1");
        let shown = quick(&err, started, url);
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{shown}");
        assert!(err.is_retryable(), "{shown}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
        assert!(shown.contains("refused"), "{shown}");
        assert!(!format!("{shown} {err:?}").contains("sekrit"), "{shown}");
    }
}
