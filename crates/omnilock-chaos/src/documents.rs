//! The protected resource as a document that each holder rewrites whole:
//! a file per lock through `omnilock::fence::FencedFile`, or a row per lock
//! of an `omnilock::sql::FencedTable` in the lock's own SQL database. A
//! client under the lock reads the document (one line per write so far),
//! works for a random while, and writes it back with its own line added,
//! `<token> <client> <write id>`:
//! - *fenced*, through the sink, which refuses a token below the highest
//!   that wrote;
//! - *unfenced* (the control), replaced all the same (a file by rename, a
//!   row by a plain `UPDATE`).
//!
//! After the run the harness reads each document (`collect`): a line whose
//! token is below one before it is a stale write accepted. So is a write
//! its client saw accepted whose line is gone (and a lost update too): the
//! writer that erased it had read the document before that line was
//! written, so one of the two wrote while a later holder held the lock.
//! Clients report refusals as they happen.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use omnilock::fence::FencedFile;
use omnilock::sql::FencedTable;
use omnilock::{ErrorKind, LockGuard};
use rand::Rng;

use crate::history::{Event, Op, Phase, Source, refused_write};
use crate::records::Records;

/// The fenced table's name, beside the lock table.
const TABLE: &str = "omnilock_chaos_documents";

/// Where the documents are.
pub enum Documents {
    /// A file per lock in this directory.
    Files(PathBuf),
    /// A row per lock of the fenced table, on the lock's SQL database.
    Table(Records),
}

/// Which documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentKind {
    /// A file per lock (`FencedFile`).
    File,
    /// A row per lock (`FencedTable`).
    Table,
}

impl DocumentKind {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            DocumentKind::File => "file",
            DocumentKind::Table => "table",
        }
    }
}

/// What a client does with a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentWrite {
    /// Through the sink (`FencedFile`, `FencedTable`).
    Fenced,
    /// Replaced without the fence (the control).
    Unfenced,
}

/// Runs `$body` with `$conn` a connection of whichever pool `$records` has.
macro_rules! with_conn {
    ($records:expr, $conn:ident => $body:expr) => {
        match $records {
            Records::Postgres(pool) => {
                let mut $conn = pool.acquire().await.map_err(|e| e.to_string())?;
                $body
            }
            Records::MySql(pool) => {
                let mut $conn = pool.acquire().await.map_err(|e| e.to_string())?;
                $body
            }
            Records::Sqlite(pool) => {
                let mut $conn = pool.acquire().await.map_err(|e| e.to_string())?;
                $body
            }
        }
    };
}

impl Documents {
    /// Files in `dir`, or (`dir` `None`) the table on the SQL store at `url`.
    pub async fn connect(dir: Option<&Path>, url: &str) -> Result<Documents, String> {
        match dir {
            Some(dir) => Ok(Documents::Files(dir.to_path_buf())),
            None => Records::connect(url)
                .await?
                .map(Documents::Table)
                .ok_or_else(|| {
                    "the table documents need a SQL store (postgres://, mysql://, sqlite://)".into()
                }),
        }
    }

    /// Empty documents for `locks` locks.
    pub async fn prepare(&self, locks: u32) -> Result<(), String> {
        match self {
            Documents::Files(dir) => {
                let _ = std::fs::remove_dir_all(dir);
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
            }
            Documents::Table(records) => {
                let table = table();
                let drop = sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {TABLE}"));
                with_conn!(records, conn => {
                    // Fresh fences: an earlier run's would refuse the control.
                    sqlx::query(drop).execute(&mut *conn).await.map_err(|e| e.to_string())?;
                    table.create(&mut *conn).await.map_err(|e| e.to_string())?;
                    for lock in 0..locks {
                        // Token 0: the first holder's write replaces it.
                        table
                            .write(&mut *conn, 0, &format!("chaos-{lock}"), b"")
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            }
        }
    }

    /// One round under `guard`: read, work up to `work`, write back with a
    /// line added. Returns the events to report.
    pub async fn rewrite(
        &self,
        client: u32,
        guard: &LockGuard,
        how: DocumentWrite,
        work: Duration,
    ) -> Vec<Event> {
        let lock = guard.name().as_str().to_string();
        let token = guard.token();
        let id: i64 = rand::thread_rng().gen_range(0..i64::MAX);
        let event = |source, op, phase| Event::now(source, op, phase).client(client).lock(&lock);
        let mut events = vec![event(Source::Client, Op::Write, Phase::Invoke).token(token)];
        let outcome = async {
            // The fenced read raises the fence (a read-modify-write must):
            // a predecessor that wakes up after it cannot write any more.
            let mut text = match how {
                DocumentWrite::Fenced => match self.read_fenced(&lock, token).await? {
                    Some(text) => text,
                    None => return Ok(false),
                },
                DocumentWrite::Unfenced => self.read(&lock).await?,
            };
            let pause = rand::thread_rng().gen_range(Duration::ZERO..=work);
            tokio::time::sleep(pause).await;
            text.push_str(&format!("{token} {client} {id}\n"));
            self.write(&lock, token, how, text.as_bytes()).await
        }
        .await;
        match outcome {
            Ok(true) => events.push(event(Source::Client, Op::Write, Phase::Ok).value(id)),
            Ok(false) => events.extend(refused_write(
                client,
                &lock,
                token,
                "refused: a later holder wrote",
            )),
            Err(e) => events.push(event(Source::Client, Op::Write, Phase::Fail).detail(e)),
        }
        events
    }

    /// Judges the document of `lock` after the run: one served write per
    /// line, and a stale write and lost update for each write in
    /// `acknowledged` (the write ids its clients saw accepted) whose line
    /// is gone.
    pub async fn collect(
        &self,
        lock: &str,
        acknowledged: &HashSet<i64>,
    ) -> Result<Vec<Event>, String> {
        let text = self.read(lock).await?;
        let mut highest = 0;
        let mut kept = HashSet::new();
        let mut events = Vec::new();
        for line in text.lines() {
            let mut words = line.split(' ').map(str::parse::<i64>);
            let (Some(Ok(token)), Some(Ok(client)), Some(Ok(id))) =
                (words.next(), words.next(), words.next())
            else {
                return Err(format!("the document of {lock} has a line {line:?}"));
            };
            let mut serve = Event::now(Source::Register, Op::Serve, Phase::Ok)
                .client(client as u32)
                .lock(lock)
                .token(token as u64)
                .detail("write");
            serve.stale = (token as u64) < highest;
            highest = highest.max(token as u64);
            kept.insert(id);
            events.push(serve);
        }
        for _ in acknowledged.difference(&kept) {
            let mut serve = Event::now(Source::Register, Op::Serve, Phase::Ok)
                .lock(lock)
                .detail("write");
            serve.stale = true;
            serve.lost_update = true;
            events.push(serve);
        }
        Ok(events)
    }

    /// Reads for a holder with `token`, raising the fence to it first;
    /// `None` when a higher token has been there.
    async fn read_fenced(&self, lock: &str, token: u64) -> Result<Option<String>, String> {
        let claimed = match self {
            Documents::Files(dir) => {
                let file = FencedFile::new(dir.join(lock));
                let read = tokio::task::spawn_blocking(move || file.read(token))
                    .await
                    .map_err(|e| e.to_string())?;
                return match read {
                    Ok(bytes) => Ok(Some(
                        String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned(),
                    )),
                    Err(e) if e.kind() == ErrorKind::StaleToken => Ok(None),
                    Err(e) => Err(e.to_string()),
                };
            }
            Documents::Table(records) => {
                let table = table();
                with_conn!(records, conn => table.claim(&mut *conn, token, lock).await)
            }
        };
        match claimed {
            Ok(()) => self.read(lock).await.map(Some),
            Err(e) if e.kind() == ErrorKind::StaleToken => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn read(&self, lock: &str) -> Result<String, String> {
        match self {
            Documents::Files(dir) => match std::fs::read(dir.join(lock)) {
                Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(e.to_string()),
            },
            Documents::Table(records) => {
                let table = table();
                let row = with_conn!(records, conn => {
                    table.read(&mut *conn, lock).await.map_err(|e| e.to_string())?
                });
                Ok(row
                    .map(|(value, _)| String::from_utf8_lossy(&value).into_owned())
                    .unwrap_or_default())
            }
        }
    }

    /// Writes `contents`: `Ok(false)` when the sink refused the token.
    async fn write(
        &self,
        lock: &str,
        token: u64,
        how: DocumentWrite,
        contents: &[u8],
    ) -> Result<bool, String> {
        let refused = |e: omnilock::Error| match e.kind() {
            ErrorKind::StaleToken => Ok(false),
            _ => Err(e.to_string()),
        };
        match (self, how) {
            (Documents::Files(dir), DocumentWrite::Fenced) => {
                let file = FencedFile::new(dir.join(lock));
                let contents = contents.to_vec();
                tokio::task::spawn_blocking(move || file.write(token, &contents))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|()| true)
                    .or_else(refused)
            }
            (Documents::Files(dir), DocumentWrite::Unfenced) => {
                let (path, temp) = (dir.join(lock), dir.join(format!("{lock}.{token}.tmp")));
                std::fs::write(&temp, contents)
                    .and_then(|()| std::fs::rename(&temp, &path))
                    .map(|()| true)
                    .map_err(|e| e.to_string())
            }
            (Documents::Table(records), how) => {
                // The control writes with token 0 against a fence kept at
                // 0: every write passes.
                let token = if how == DocumentWrite::Fenced {
                    token
                } else {
                    0
                };
                let table = table();
                with_conn!(records, conn => {
                    table
                        .write(&mut *conn, token, lock, contents)
                        .await
                        .map(|()| true)
                        .or_else(refused)
                })
            }
        }
    }
}

fn table() -> FencedTable {
    FencedTable::new(TABLE).expect("a plain identifier")
}
