//! sqlx errors → omnilock errors. Each says in one line what failed (the
//! SQLite file's path, or the server's `host:port`) and why; none shows the
//! password (the connection URL is never part of a message).
//!
//! Connection trouble is `Unavailable` and retryable. What retrying cannot
//! mend is not: a SQLite file that is read-only or cannot be opened is
//! `Unavailable` but not retryable (a waiting acquire fails at once instead
//! of polling until its timeout), and a file that is not a database is
//! `InvalidConfig`.

use std::path::Path;
use std::time::Duration;

use omnilock_core::{Error, ErrorKind};

use crate::config::{Dialect, SqlConfig};
use crate::tls::SslMode;

/// SQLite's primary result codes that retrying cannot mend.
const SQLITE_PERM: i64 = 3;
const SQLITE_READONLY: i64 = 8;
const SQLITE_CANTOPEN: i64 = 14;
const SQLITE_NOTADB: i64 = 26;

/// SQLite's primary result code of a database error (sqlx reports the
/// extended code, whose low byte is the primary one).
fn sqlite_code(err: &sqlx::Error) -> Option<i64> {
    match err {
        sqlx::Error::Database(db) => db.code()?.parse::<i64>().ok().map(|c| c & 0xff),
        _ => None,
    }
}

/// Whether a SQLite error says the file can never be used as it is (read
/// only, cannot be opened, not a database). A pool connection whose setup
/// pragmas fail this way is kept, so that the statement that needs it fails
/// at once with this error, instead of the pool retrying the connection until
/// its timeout and reporting only "pool timed out".
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_is_permanent(err: &sqlx::Error) -> bool {
    matches!(
        sqlite_code(err),
        Some(SQLITE_PERM | SQLITE_READONLY | SQLITE_CANTOPEN | SQLITE_NOTADB)
    )
}

/// Whether a SQLite error is SQLITE_BUSY or SQLITE_LOCKED: another
/// connection holds a lock the statement needs.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_is_busy(err: &sqlx::Error) -> bool {
    matches!(sqlite_code(err), Some(5 | 6))
}

/// Whether `err` is the database's "no such table" (which [`map_err`]
/// reports as the lock table's), so that a statement on another table can
/// name the one missing.
pub(crate) fn is_missing_table(err: &sqlx::Error, dialect: Dialect) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match dialect {
        Dialect::Sqlite => sqlite_code(err) == Some(1) && db.message().contains("no such table"),
        Dialect::Postgres => db.code().as_deref() == Some("42P01"),
        Dialect::MySql => db.code().as_deref() == Some("42S02"),
    }
}

/// Classifies a sqlx error for the store `config` describes.
pub(crate) fn map_err(err: sqlx::Error, config: &SqlConfig) -> Error {
    let kind = config.dialect.kind();
    let place = config.place.as_str();
    let error = match &err {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            // The message says it all; the cause would repeat it.
            return Error::unavailable(format!(
                "connection to {place} refused (is the database running and listening there?)"
            ))
            .with_backend(kind);
        }
        // rustls reports a certificate that does not verify as an I/O
        // error (InvalidData) during the handshake.
        sqlx::Error::Io(io)
            if io.kind() == std::io::ErrorKind::InvalidData
                && io.to_string().contains("certificate") =>
        {
            return tls_error(&io.to_string(), place).with_backend(kind);
        }
        sqlx::Error::Io(_) => Error::unavailable(format!("cannot reach the database at {place}")),
        // What the client cannot speak (an authentication method or plugin
        // it lacks) stays so.
        sqlx::Error::Protocol(why) if why.to_ascii_lowercase().contains("authentication") => {
            return Error::config(format!(
                "the database at {place} asks for what this client cannot do: {why}"
            ))
            .with_backend(kind);
        }
        // Other bytes that are not what the protocol expects: most often a
        // connection cut or garbled on its way (a proxy, a partition)
        // during the handshake, which another connection may get through;
        // or another kind of server on that port, which the message lets
        // the reader see.
        sqlx::Error::Protocol(why) => {
            return Error::unavailable(format!(
                "the connection to the database at {place} broke the protocol ({why}): cut \
                 or garbled on its way, or not a database of this kind on that port?"
            ))
            .with_backend(kind);
        }
        sqlx::Error::Tls(why) => return tls_error(&why.to_string(), place).with_backend(kind),
        sqlx::Error::PoolTimedOut => {
            return Error::unavailable(no_connection(place, config.connect_timeout))
                .with_backend(kind);
        }
        sqlx::Error::PoolClosed => Error::unavailable("the store is closed").with_retryable(false),
        sqlx::Error::WorkerCrashed => {
            Error::unavailable(format!("the SQLite worker for {place} stopped"))
        }
        // sqlx's settings errors may quote the connection URL: no cause.
        sqlx::Error::Configuration(_) => {
            return Error::config(format!("invalid database settings for {place}"))
                .with_backend(kind);
        }
        sqlx::Error::Database(_) if config.dialect == Dialect::Sqlite => sqlite_error(&err, place)
            .unwrap_or_else(|| {
                Error::new(
                    ErrorKind::Backend,
                    format!("{place}: SQLite reported an error"),
                )
            }),
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            let message = db.message();
            match (config.dialect, code.as_str()) {
                // pg_hba.conf: a `hostssl` line only, or a `hostnossl ...
                // reject` line, for this account.
                (Dialect::Postgres, "28000") if message.contains("no encryption") => {
                    Error::auth(format!(
                        "the database at {place} accepts this account only over TLS \
                         (connect with sslmode=require or stronger)"
                    ))
                }
                (Dialect::Postgres, "28000") if message.contains("certificate") => {
                    Error::auth(format!(
                        "the database at {place} wants a valid client certificate for this \
                         account (options sslcert and sslkey)"
                    ))
                }
                (Dialect::Postgres, "28P01" | "28000") => Error::auth(format!(
                    "the database at {place} refused the credentials (user name or password)"
                )),
                // MySQL says "access denied" alike for a wrong password and
                // for an account that requires TLS or a client certificate.
                (Dialect::MySql, "28000") => Error::auth(format!(
                    "the database at {place} refused the credentials (user name or password; \
                     or the account requires TLS{} or a client certificate: sslcert, sslkey)",
                    match config.tls.mode {
                        Some(SslMode::Disable) => ", which sslmode=disable turns off",
                        _ => "",
                    }
                )),
                // The server's connection limit (or the account's): a
                // connection closes, and the next is let in.
                (Dialect::Postgres, "53300") => connection_limit(place, message),
                (Dialect::MySql, _)
                    if matches!(mysql_number(db.as_ref()), Some(1040 | 1203 | 1226)) =>
                {
                    connection_limit(place, message)
                }
                (Dialect::Postgres, "3D000") => Error::config(format!(
                    "the database named in the URL does not exist at {place}"
                )),
                // MySQL answers "access denied" for a database the user may
                // not see, whether or not it exists.
                (Dialect::MySql, "42000")
                    if message.contains("Unknown database") || message.contains("to database") =>
                {
                    Error::config(format!(
                        "the database named in the URL does not exist at {place} or this user may not use it"
                    ))
                }
                (Dialect::Postgres, "42P01") | (Dialect::MySql, "42S02") => Error::config(
                    "the lock table does not exist (create it, or allow create_table)",
                ),
                // A deadlock or a serialization conflict rolled the
                // transaction back: running it again can succeed.
                (_, "40001" | "40P01") => Error::new(
                    ErrorKind::Backend,
                    format!(
                        "the database at {place} rolled a transaction back (deadlock or conflict)"
                    ),
                )
                .with_retryable(true),
                (Dialect::Postgres, c) if c.starts_with("08") || c.starts_with("57P") => {
                    Error::unavailable(format!("the connection to {place} failed"))
                }
                _ => Error::new(
                    ErrorKind::Backend,
                    format!("the database at {place} reported an error"),
                ),
            }
        }
        _ => Error::new(ErrorKind::Backend, format!("database error ({place})")),
    };
    error.with_backend(kind).with_cause(err)
}

/// MySQL's error number of `db`: 1040 too many connections, 1203 the
/// account's `max_user_connections`, 1226 another account limit. (The
/// message is in the server's language, `lc_messages`.)
fn mysql_number(db: &dyn sqlx::error::DatabaseError) -> Option<u16> {
    #[cfg(feature = "mysql")]
    {
        db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(sqlx::mysql::MySqlDatabaseError::number)
    }
    #[cfg(not(feature = "mysql"))]
    {
        let _ = db;
        None
    }
}

/// What a refusal by the server's connection limit says (see
/// [`is_connection_limit`]).
pub(crate) const REFUSED_ONE_MORE: &str = "refused one more connection";

/// The server refused a connection for its connection limit: retryable,
/// with the server's own words (not sqlx's rendering, which adds the
/// server's source line).
fn connection_limit(place: &str, why: &str) -> Error {
    Error::unavailable(format!(
        "the database at {place} {REFUSED_ONE_MORE} ({why})"
    ))
}

/// Whether `err` is a refusal by the server's connection limit, which
/// passes as other clients close theirs: connecting tries again until its
/// timeout, as waits do until theirs.
pub(crate) fn is_connection_limit(err: &Error) -> bool {
    err.kind() == ErrorKind::Unavailable && err.message().contains(REFUSED_ONE_MORE)
}

/// A failed TLS handshake. A certificate that does not verify, or a server
/// without TLS when the URL requires it, stays so however often one retries:
/// `Tls`, naming the host and the reason (rustls's words, which
/// never hold the password). Anything else may pass: `Unavailable`.
fn tls_error(why: &str, place: &str) -> Error {
    let lower = why.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("notvalidforname") {
        Error::tls(format!(
            "TLS with the database at {place}: the server's certificate does not verify ({why}); \
             check the host name in the URL and sslrootcert, or relax sslmode"
        ))
    } else if lower.contains("not support") {
        Error::tls(format!(
            "the database at {place} does not offer TLS, which sslmode requires"
        ))
    } else {
        Error::unavailable(format!("TLS with the database at {place} failed: {why}"))
    }
}

fn no_connection(place: &str, timeout: Duration) -> String {
    format!("no connection to the database at {place} within {timeout:?}")
}

/// SQLite's errors, with the file named. `None`: not one of those.
fn sqlite_error(err: &sqlx::Error, path: &str) -> Option<Error> {
    let message = match sqlite_code(err)? {
        // SQLITE_BUSY, SQLITE_LOCKED: another writer holds the file.
        5 | 6 => {
            return Some(Error::unavailable(format!(
                "{path} is busy (another process holds its write lock)"
            )));
        }
        SQLITE_READONLY => format!(
            "cannot write {path}: the database is read-only (permissions of the file or its \
             directory, a read-only file system, or a file from a newer SQLite)"
        ),
        SQLITE_PERM => format!("cannot use {path}: permission denied"),
        SQLITE_CANTOPEN => cannot_open(Path::new(path)),
        SQLITE_NOTADB => return Some(Error::config(format!("{path} is not a SQLite database"))),
        // SQLITE_IOERR, SQLITE_FULL: may pass (space freed, disk back).
        10 | 13 => return Some(Error::unavailable(format!("I/O error on {path}"))),
        11 => {
            return Some(Error::new(
                ErrorKind::Backend,
                format!("{path} is corrupt (database disk image is malformed)"),
            ));
        }
        1 if err.to_string().contains("no such table") => {
            return Some(Error::config(
                "the lock table does not exist (create it, or allow create_table)",
            ));
        }
        _ => return None,
    };
    Some(Error::unavailable(message).with_retryable(false))
}

/// Why SQLite cannot open `path`: the directory is missing, not a directory,
/// not accessible, or the file (or its `-wal`/`-shm` companions) cannot be
/// opened.
fn cannot_open(path: &Path) -> String {
    let shown = path.display();
    let dir = path.parent().unwrap_or(Path::new("/"));
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return format!(
                "cannot open {shown}: the directory {} does not exist",
                dir.display()
            );
        }
        Err(e) => {
            return format!(
                "cannot open {shown}: cannot access the directory {}: {}",
                dir.display(),
                io_reason(&e)
            );
        }
        Ok(meta) if !meta.is_dir() => {
            return format!("cannot open {shown}: {} is not a directory", dir.display());
        }
        Ok(_) => {}
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => format!("cannot open {shown}: it is a directory"),
        Ok(_) => match std::fs::File::open(path) {
            Err(e) => format!("cannot open {shown}: {}", io_reason(&e)),
            Ok(_) => format!(
                "cannot open {shown} or its -wal/-shm files (check the permissions of the file and its directory)"
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
            "cannot create {shown}: the directory {} is not writable",
            dir.display()
        ),
        Err(e) => format!("cannot open {shown}: {}", io_reason(&e)),
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    }
}
