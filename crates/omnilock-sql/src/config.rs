//! SQL store URLs → connection settings.
//!
//! `sqlite:///abs/path.db`, `mysql://user:pw@host:port/db`,
//! `postgres://user:pw@host:port/db`, each with the options below.

use std::time::Duration;

use omnilock_core::{Error, HostPort, Result, Secret, StoreUrl};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use crate::tls::TlsOptions;

/// The SQL dialect a store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3.35+ (UPSERT with RETURNING).
    Sqlite,
    /// MySQL 8 / MariaDB 10.5+.
    MySql,
    /// PostgreSQL 12+.
    Postgres,
}

impl Dialect {
    /// The backend name used in errors and metrics.
    pub fn kind(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::MySql => "mysql",
            Dialect::Postgres => "postgres",
        }
    }

    /// The longest `?table=` this dialect accepts, in characters: the
    /// longest name omnilock derives from the table, fair mode's index
    /// `<table>_queue_name`, must fit the database's identifier limit
    /// (PostgreSQL 63 bytes, MySQL/MariaDB 64 characters: 52 and 53).
    /// SQLite has no identifier limit; omnilock caps its table names at 63.
    pub fn max_table_len(self) -> usize {
        match self {
            Dialect::Sqlite => 63,
            Dialect::Postgres => 63 - LONGEST_SUFFIX.len(),
            Dialect::MySql => 64 - LONGEST_SUFFIX.len(),
        }
    }

    fn identifier_limit(self) -> &'static str {
        match self {
            Dialect::Sqlite => "with SQLite (omnilock's cap; SQLite itself has no limit)",
            Dialect::Postgres => {
                "with PostgreSQL, so that fair mode's index <table>_queue_name fits its 63-byte identifiers"
            }
            Dialect::MySql => {
                "with MySQL/MariaDB, so that fair mode's index <table>_queue_name fits its 64-character identifiers"
            }
        }
    }
}

/// The longest suffix omnilock appends to the table name: fair mode's index
/// on its waiting line, `<table>_queue_name`.
pub(crate) const LONGEST_SUFFIX: &str = "_queue_name";

/// The table omnilock uses unless `?table=` names another.
pub const DEFAULT_TABLE: &str = "omnilock_locks";

/// Settings for one SQL store.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqlConfig {
    /// Which SQL to speak.
    pub dialect: Dialect,
    /// The URL handed to sqlx; it may contain the password.
    pub(crate) database_url: Secret,
    /// Where the store is, for messages (password redacted).
    pub shown: String,
    /// What errors name: the SQLite file's path, or the server's `host:port`.
    pub(crate) place: String,
    /// The lock table (`?table=`), a plain identifier.
    pub table: String,
    /// The longest pause between two polls of a busy lock (`?max_poll=`, default 250ms).
    pub max_poll: Duration,
    /// How long to wait for a connection (`?connect_timeout=`, default 5s).
    pub connect_timeout: Duration,
    /// Connections in the pool (`?pool=`, default 8; SQLite 4).
    pub pool_size: u32,
    /// Idle connections the pool keeps (`?max_idle=`, default 2, at most
    /// `pool`): the ones beyond are closed, least recently used first, so
    /// that a client holds what its load needs now and not the most it
    /// ever needed. On an application's pool, its own size (its
    /// connections are not closed).
    pub max_idle: u32,
    /// Whether to create the table if it is missing (`?create_table=`, default true).
    pub create_table: bool,
    /// Wake waiters in other processes through the database (`?notify=`,
    /// default true; with `false` they only poll): PostgreSQL by
    /// LISTEN/NOTIFY, MySQL/MariaDB table mode's mutexes by a wake-up
    /// `GET_LOCK` each. Not SQLite.
    pub notify: bool,
    /// How long a waiter's poll marks a lock as waited for (PostgreSQL with
    /// NOTIFY: a release notifies only while the mark is fresh). Outlives
    /// the longest pause between two polls.
    pub waiting_mark: Duration,
    /// Serve waiters in request order (`?fair=`, default true; false in
    /// advisory mode): waiters take tickets in `<table>_queue`.
    pub fair: bool,
    /// TLS to a PostgreSQL or MySQL/MariaDB server (`?sslmode=`,
    /// `?sslrootcert=`, `?sslcert=`, `?sslkey=`; see [`TlsOptions`]).
    pub tls: TlsOptions,
    /// `?mode=advisory` (MySQL/MariaDB and PostgreSQL): a mutex is the
    /// database's own session lock (`GET_LOCK`, `pg_advisory_lock`), held
    /// on a connection of its own; `?mode=table` (the default) is a row of
    /// the lock table. Semaphores and read-write locks stay on the tables
    /// in both modes. See [docs/backends/sql.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/sql.md), *Advisory mode*.
    pub advisory: bool,
    /// Advisory mode: how many sessions (connections) a store opens before
    /// held locks share them (`?sessions=`, default 64). Below it every
    /// held lock has a session of its own.
    pub advisory_sessions: u32,
}

/// Idle connections a store's own pool keeps unless `?max_idle=` says
/// otherwise (as Go's `database/sql`).
pub(crate) const DEFAULT_MAX_IDLE: u64 = 2;

/// Advisory mode's sessions per store before held locks share them.
pub(crate) const DEFAULT_SESSIONS: u64 = 64;

pub(crate) fn check_sessions(sessions: u64) -> Result<()> {
    if !(1..=10_000).contains(&sessions) {
        return Err(Error::config(
            "option \"sessions\" must be between 1 and 10000",
        ));
    }
    Ok(())
}

/// The longest pause between two polls unless `?max_poll=` says otherwise.
pub(crate) const DEFAULT_MAX_POLL: Duration = Duration::from_millis(250);

/// How long to wait for the database unless `?connect_timeout=` says otherwise.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl SqlConfig {
    /// Whether the store listens for PostgreSQL's NOTIFY (waiters mark the
    /// row so that releases send one).
    pub(crate) fn listens(&self) -> bool {
        self.notify && self.dialect == Dialect::Postgres
    }
}

pub(crate) fn check_max_poll(max_poll: Duration) -> Result<()> {
    if max_poll < Duration::from_millis(1) || max_poll > Duration::from_secs(60) {
        return Err(Error::config(
            "option \"max_poll\" must be between 1ms and 60s",
        ));
    }
    Ok(())
}

pub(crate) fn check_connect_timeout(timeout: Duration) -> Result<()> {
    if timeout < Duration::from_millis(10) || timeout > Duration::from_secs(600) {
        return Err(Error::config(
            "option \"connect_timeout\" must be between 10ms and 10m",
        ));
    }
    Ok(())
}

/// How long a waiter's poll marks a lock as waited for: longer than the
/// longest pause between two polls.
pub(crate) fn waiting_mark(max_poll: Duration) -> Duration {
    (max_poll * 3).max(Duration::from_secs(2))
}

/// Characters escaped in a SQLite file path inside a sqlx URL.
const PATH: &AsciiSet = &CONTROLS.add(b'%').add(b'?').add(b'#').add(b' ');

impl SqlConfig {
    /// Reads a SQL store URL. Options are consumed; unknown ones are an error.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        let mut url = url.clone();
        let dialect = match url.scheme() {
            "sqlite" => Dialect::Sqlite,
            "mysql" | "mariadb" => Dialect::MySql,
            "postgres" | "postgresql" => Dialect::Postgres,
            other => return Err(Error::config(format!("not a SQL store scheme: {other}"))),
        };
        let table = url
            .take("table")
            .unwrap_or_else(|| DEFAULT_TABLE.to_string());
        check_table(&table, dialect)?;
        let max_poll = url.take_duration("max_poll")?.unwrap_or(DEFAULT_MAX_POLL);
        check_max_poll(max_poll)?;
        let connect_timeout = url
            .take_duration("connect_timeout")?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        check_connect_timeout(connect_timeout)?;
        let default_pool = if dialect == Dialect::Sqlite { 4 } else { 8 };
        let pool_size = url.take_u64("pool")?.unwrap_or(default_pool);
        if !(1..=1000).contains(&pool_size) {
            return Err(Error::config("option \"pool\" must be between 1 and 1000"));
        }
        let max_idle = url
            .take_u64("max_idle")?
            .unwrap_or(DEFAULT_MAX_IDLE.min(pool_size));
        if max_idle > pool_size {
            return Err(Error::config(format!(
                "option \"max_idle\" ({max_idle}) must be at most the pool's size ({pool_size})"
            )));
        }
        let create_table = url.take_bool("create_table")?.unwrap_or(true);
        let fair = url.take_bool("fair")?;
        let advisory = take_mode(&mut url, dialect, fair == Some(true))?;
        // Fair unless asked otherwise, or in advisory mode (the database
        // picks the next waiter there).
        let fair = fair.unwrap_or(!advisory);
        let advisory_sessions = url.take_u64("sessions")?.unwrap_or(DEFAULT_SESSIONS);
        check_sessions(advisory_sessions)?;
        let notify = match dialect {
            Dialect::Postgres | Dialect::MySql => url.take_bool("notify")?.unwrap_or(true),
            Dialect::Sqlite => false,
        };
        let tls = match dialect {
            Dialect::Sqlite => TlsOptions::default(),
            Dialect::MySql | Dialect::Postgres => TlsOptions::take(&mut url, dialect)?,
        };
        let (database_url, place) = match dialect {
            Dialect::Sqlite => sqlite_url(&url)?,
            Dialect::MySql | Dialect::Postgres => server_url(&url, dialect)?,
        };
        url.finish()?;
        Ok(SqlConfig {
            dialect,
            database_url,
            shown: url.to_string(),
            place,
            table,
            max_poll,
            connect_timeout,
            pool_size: pool_size as u32,
            max_idle: max_idle as u32,
            create_table,
            notify,
            waiting_mark: waiting_mark(max_poll),
            fair,
            tls,
            advisory,
            advisory_sessions: advisory_sessions as u32,
        })
    }

    /// A SQLite store at `path` (absolute), with default options.
    pub fn sqlite(path: &std::path::Path) -> Result<Self> {
        let text = path
            .to_str()
            .ok_or_else(|| Error::config("the SQLite path is not valid UTF-8"))?;
        if !path.is_absolute() {
            return Err(Error::config(format!(
                "the SQLite path must be absolute, got {text:?}"
            )));
        }
        let encoded = utf8_percent_encode(text, PATH).to_string();
        SqlConfig::from_url(&StoreUrl::parse(&format!("sqlite://{encoded}"))?)
    }
}

/// `?mode=`: `table` (the default) or `advisory`, which SQLite lacks and
/// which has no waiting line of omnilock's for `fair=true` to order.
fn take_mode(url: &mut StoreUrl, dialect: Dialect, fair: bool) -> Result<bool> {
    let advisory = match url.take("mode").as_deref() {
        None | Some("table") => false,
        Some("advisory") => true,
        Some(other) => {
            return Err(Error::config(format!(
                "option \"mode\" is \"table\" or \"advisory\", not {:?}",
                shorten(other)
            )));
        }
    };
    check_mode(dialect, advisory, fair)?;
    Ok(advisory)
}

/// Advisory mode needs a database with advisory locks, and has no waiting
/// line of omnilock's for `fair` to order.
pub(crate) fn check_mode(dialect: Dialect, advisory: bool, fair: bool) -> Result<()> {
    if advisory && dialect == Dialect::Sqlite {
        return Err(Error::config(
            "option \"mode=advisory\" needs MySQL/MariaDB or PostgreSQL: SQLite has no advisory locks",
        ));
    }
    if advisory && fair {
        return Err(Error::config(
            "options \"mode=advisory\" and \"fair=true\" do not mix: in advisory mode the database \
             itself decides which waiter is next, with no waiting line of omnilock's to order",
        ));
    }
    Ok(())
}

/// A table name omnilock can use: a plain identifier (letters, digits, `_`;
/// not starting with a digit) short enough for every name derived from it,
/// and not one of the database's own. Reserved words are fine: every
/// statement quotes the table's identifiers.
pub(crate) fn check_table(table: &str, dialect: Dialect) -> Result<()> {
    let mut chars = table.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::config(format!(
            "option \"table\": {:?} is not a plain SQL identifier (ASCII letters, digits and _, not starting with a digit)",
            shorten(table)
        )));
    }
    let max = dialect.max_table_len();
    if table.len() > max {
        return Err(Error::config(format!(
            "option \"table\": {:?} is {} characters long; at most {max} {}",
            shorten(table),
            table.len(),
            dialect.identifier_limit()
        )));
    }
    let lower = table.to_ascii_lowercase();
    if lower.starts_with("sqlite_")
        || lower.starts_with("pg_")
        || lower == "information_schema"
        || lower == "performance_schema"
    {
        return Err(Error::config(format!(
            "option \"table\": {table:?} is a name the databases reserve for their own tables \
             (sqlite_*, pg_*, information_schema, performance_schema); choose another"
        )));
    }
    Ok(())
}

/// At most 80 characters of user input in a message.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

fn sqlite_url(url: &StoreUrl) -> Result<(Secret, String)> {
    if !url.hosts().is_empty() || url.username().is_some() || url.password().is_some() {
        return Err(Error::config(
            "a SQLite URL names an absolute file path: sqlite:///abs/path.db (three slashes)",
        ));
    }
    if url.path().is_empty() || url.path().ends_with('/') {
        return Err(Error::config(
            "a SQLite URL needs a file name: sqlite:///abs/path.db",
        ));
    }
    let path = format!("/{}", url.path());
    let encoded = utf8_percent_encode(&path, PATH);
    Ok((Secret::new(format!("sqlite://{encoded}?mode=rwc")), path))
}

fn server_url(url: &StoreUrl, dialect: Dialect) -> Result<(Secret, String)> {
    let (host, place) = match url.hosts() {
        [one] => {
            let port = one.port.unwrap_or(match dialect {
                Dialect::MySql => 3306,
                _ => 5432,
            });
            let place = HostPort {
                host: one.host.clone(),
                port: Some(port),
            };
            (one.to_string(), place.to_string())
        }
        [] => return Err(Error::config("the URL names no database host")),
        _ => {
            return Err(Error::config(
                "a SQL store URL names one host (use a proxy or VIP for failover)",
            ));
        }
    };
    if url.path().is_empty() || url.path().contains('/') {
        return Err(Error::config(
            "the URL must name one database: scheme://user:pw@host:port/DATABASE",
        ));
    }
    let encode = |s: &str| utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    let mut out = String::from(match dialect {
        Dialect::MySql => "mysql://",
        _ => "postgres://",
    });
    if let Some(user) = url.username() {
        out.push_str(&encode(user));
    }
    if let Some(password) = url.password() {
        out.push(':');
        out.push_str(&encode(password.expose()));
    }
    if url.username().is_some() || url.password().is_some() {
        out.push('@');
    }
    out.push_str(&host);
    out.push('/');
    out.push_str(&encode(url.path()));
    Ok((Secret::new(out), place))
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnilock_core::ErrorKind;

    fn parse(url: &str) -> Result<SqlConfig> {
        SqlConfig::from_url(&StoreUrl::parse(url)?)
    }

    #[test]
    fn sqlite_urls() {
        let config = parse("sqlite:///tmp/a b.db?table=my_locks&max_poll=50ms").unwrap();
        assert_eq!(config.dialect, Dialect::Sqlite);
        assert_eq!(config.table, "my_locks");
        assert_eq!(config.max_poll, Duration::from_millis(50));
        assert_eq!(
            config.database_url.expose(),
            "sqlite:///tmp/a%20b.db?mode=rwc"
        );
        for bad in [
            "sqlite://relative.db",
            "sqlite:///",
            "sqlite:///x.db?table=x;drop",
            "sqlite:///x.db?table=1x",
            "sqlite:///x.db?pool=0",
            "sqlite:///x.db?colour=blue",
        ] {
            assert_eq!(
                parse(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
    }

    #[test]
    fn mode_is_table_or_advisory_where_the_database_has_advisory_locks() {
        assert!(!parse("mysql://h/db").unwrap().advisory);
        assert!(!parse("mysql://h/db?mode=table").unwrap().advisory);
        assert!(parse("mysql://h/db?mode=advisory").unwrap().advisory);
        assert!(parse("postgres://h/db?mode=advisory").unwrap().advisory);
        for (url, says) in [
            (
                "sqlite:///x.db?mode=advisory",
                "SQLite has no advisory locks",
            ),
            ("postgres://h/db?mode=advisory&fair=true", "do not mix"),
            ("mysql://h/db?mode=Advisory", "not \"Advisory\""),
            ("mysql://h/db?mode=", "not \"\""),
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}");
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn server_urls_keep_passwords_secret() {
        let config = parse("postgres://app:p%40ss@127.0.0.1:5432/locks").unwrap();
        assert_eq!(config.dialect, Dialect::Postgres);
        assert_eq!(
            config.database_url.expose(),
            "postgres://app:p%40ss@127.0.0.1:5432/locks"
        );
        assert!(!format!("{config:?}").contains("p%40ss"));
        assert!(!format!("{config:?}").contains("p@ss"));
        let err = parse("mysql://app:secret@h1:1,h2:2/db").unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }

    #[test]
    fn table_names_fit_every_derived_identifier() {
        for (scheme, longest) in [
            ("sqlite:///x.db", 63),
            ("postgres://h/db", 52),
            ("mysql://h/db", 53),
        ] {
            let url = |n: usize| format!("{scheme}?fair=true&table=t{}", "x".repeat(n - 1));
            assert_eq!(
                parse(&url(longest)).unwrap().table.len(),
                longest,
                "{scheme}"
            );
            let err = parse(&url(longest + 1)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{scheme}");
            assert!(
                err.to_string().contains(&format!("at most {longest}")),
                "{err}"
            );
            assert!(
                err.to_string()
                    .contains(&format!("{} characters long", longest + 1)),
                "{err}"
            );
        }
        // The MariaDB limit: <table>_queue_name is 64 characters at 53.
        assert_eq!(format!("{}_queue_name", "x".repeat(53)).len(), 64);
    }

    #[test]
    fn table_names_of_the_databases_own_are_refused() {
        for table in [
            "sqlite_master",
            "sqlite_sequence",
            "SQLITE_x",
            "pg_class",
            "pg_locks",
            "Pg_stat",
            "information_schema",
            "INFORMATION_SCHEMA",
            "performance_schema",
        ] {
            for scheme in ["sqlite:///x.db", "postgres://h/db", "mysql://h/db"] {
                let err = parse(&format!("{scheme}?table={table}")).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{scheme} {table}");
                assert!(err.to_string().contains("reserve"), "{err}");
            }
        }
        // Reserved words are fine: identifiers are quoted.
        for table in ["select", "order", "TABLE", "user", "lock", "key"] {
            assert_eq!(
                parse(&format!("mysql://h/db?table={table}")).unwrap().table,
                table
            );
        }
        for bad in ["", "1x", "a-b", "a b", "t\u{e9}", "a`b", "a\"b", "x;drop"] {
            let url = format!("sqlite:///x.db?table={}", bad.replace(' ', "%20"));
            let err = parse(&url).map(|c| c.table).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad:?}: {err}");
        }
        let err = parse(&format!("sqlite:///x.db?table={}", "\u{e9}".repeat(500))).unwrap_err();
        assert!(err.to_string().len() < 400, "{err}");
    }

    #[test]
    fn max_idle_is_at_most_the_pool() {
        assert_eq!(parse("postgres://h/db").unwrap().max_idle, 2);
        assert_eq!(parse("mysql://h/db?pool=1").unwrap().max_idle, 1);
        assert_eq!(parse("postgres://h/db?max_idle=0").unwrap().max_idle, 0);
        assert_eq!(
            parse("postgres://h/db?pool=4&max_idle=4").unwrap().max_idle,
            4
        );
        let err = parse("postgres://h/db?pool=4&max_idle=5").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.to_string().contains("at most the pool's size (4)"),
            "{err}"
        );
        assert!(parse("sqlite:///x.db?max_idle=many").is_err());
    }

    #[test]
    fn connect_timeout_and_places() {
        assert!(parse("postgres://h/db?connect_timeout=0s").is_err());
        assert!(parse("postgres://h/db?connect_timeout=1h").is_err());
        assert_eq!(parse("postgres://u:pw@h/db").unwrap().place, "h:5432");
        assert_eq!(parse("mysql://u:pw@h/db").unwrap().place, "h:3306");
        assert_eq!(parse("mysql://u:pw@[::1]:9/db").unwrap().place, "[::1]:9");
        assert_eq!(
            parse("sqlite:///tmp/a%20b.db").unwrap().place,
            "/tmp/a b.db"
        );
    }

    #[test]
    fn sqlite_paths() {
        let config = SqlConfig::sqlite(std::path::Path::new("/tmp/x?y.db")).unwrap();
        assert_eq!(
            config.database_url.expose(),
            "sqlite:///tmp/x%3Fy.db?mode=rwc"
        );
        assert!(SqlConfig::sqlite(std::path::Path::new("rel.db")).is_err());
    }
}
