//! The SQL, per dialect. Every statement binds its values as parameters; the
//! only text spliced in is the table name, checked to be a plain identifier
//! and quoted (so reserved words such as `select` work as table names).
//!
//! Each statement carries the list of values it binds, by name, in the
//! order its placeholders expect them ([`Statement::params`]): PostgreSQL
//! and SQLite number their placeholders (`$1` is the list's first value,
//! and may appear more than once); MySQL's `?` are positional, so its list
//! names a value once per placeholder. Code that runs a statement never
//! lists values by position (see [`crate::conn::query`]).
//!
//! One row per lock name, kept after release so that the fencing token (a
//! per-name counter) survives release and takeover:
//! `owner` is NULL when the lock is free; `expires_at` and `updated_at` are
//! milliseconds since the Unix epoch **by the database's clock**, never the
//! client's.

pub(crate) mod advisory;
mod counted;
mod inspect;
mod mysql;
mod records;
mod renew_batch;
pub(crate) mod schema;
mod upsert;

pub(crate) use counted::Counted;
#[cfg(feature = "postgres")]
pub(crate) use counted::notify_channel;
pub(crate) use inspect::{Inspect, MUTEX_KIND, prefix_end};
pub(crate) use records::{Records, records_name};
pub(crate) use renew_batch::{BatchStatements, RenewBatch};

use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

use crate::config::Dialect;

/// MySQL/MariaDB's clock in milliseconds since the Unix epoch.
pub(crate) const MYSQL_NOW: &str = mysql::NOW;

/// PostgreSQL's clock in milliseconds since the Unix epoch.
pub(crate) const POSTGRES_NOW: &str = upsert::POSTGRES_NOW;

/// A value a statement binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// The lock name.
    Name,
    /// The caller's owner id.
    Owner,
    /// The lease asked for, in milliseconds.
    TtlMs,
    /// 1 if the request may re-enter a lock its owner holds, else 0.
    Reentrant,
    /// Fair mode: the caller's ticket (`i64::MAX` without one).
    Ticket,
    /// How long a waiting mark or a ticket lasts, in milliseconds.
    LeaseMs,
    /// A ticket's id.
    Id,
    /// The holder's fencing token.
    Token,
    /// A semaphore's or read-write lock's family (`sem`, `rw`).
    Family,
    /// An entry's weight (a permit or reader 1, a writer the capacity).
    Weight,
    /// A semaphore's permits, or a read-write lock's fixed capacity.
    Capacity,
    /// The lowest name of a range (`list`: the prefix).
    RangeStart,
    /// The first name past a range (`list`: the prefix's end, see
    /// [`prefix_end`]).
    RangeEnd,
    /// A record's value.
    Value,
    /// How long a record is kept, in milliseconds.
    KeepMs,
}

/// The values a statement may bind; each statement takes the ones its
/// [`Statement::params`] names.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Args<'a> {
    pub name: &'a str,
    pub owner: &'a str,
    pub ttl_ms: i64,
    pub reentrant: i64,
    pub ticket: i64,
    pub lease_ms: i64,
    pub id: i64,
    pub token: i64,
    pub family: &'a str,
    pub weight: i64,
    pub capacity: i64,
    pub range_start: &'a str,
    pub range_end: &'a str,
    pub value: &'a str,
    pub keep_ms: i64,
}

/// One SQL statement and the values it binds, in placeholder order.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    pub sql: SqlStr,
    pub params: Vec<Param>,
}

impl Statement {
    pub(crate) fn new(sql: String, params: &[Param]) -> Self {
        // The text is ours: a fixed statement with the checked, quoted table
        // name spliced in; every value is a bound parameter.
        // An `Arc<str>`: the statement is cloned into every query, and
        // cloning an owned `SqlStr` copies the text each time.
        Statement {
            sql: AssertSqlSafe(std::sync::Arc::<str>::from(sql)).into_sql_str(),
            params: params.to_vec(),
        }
    }
}

/// Fair mode: a waiter takes a ticket (an auto-increment id) and the lock
/// goes to the oldest live ticket. Tickets carry a lease that the waiter
/// refreshes as it polls, so a crashed waiter's ticket stops counting.
#[derive(Debug, Clone)]
pub(crate) struct Tickets {
    /// Returns the new id (MySQL: as the last insert id).
    pub enqueue: Statement,
    pub heartbeat: Statement,
    pub dequeue: Statement,
    /// Removes tickets of this lock long expired.
    pub sweep: Statement,
    /// How many live tickets of this lock are older than ours, and the
    /// youngest of them (NULL when ours is the oldest).
    pub ahead: Statement,
}

/// A lock taken inside the caller's transaction: the lock's row, written
/// in that transaction, is the hold (its row lock, or SQLite's write lock,
/// keeps others out until the transaction ends). The row stays free as the
/// other holders see it: `owner` NULL, only the token bumped.
#[derive(Debug, Clone)]
pub(crate) struct InTx {
    /// Bumps the token of a free or expired lock's row. PostgreSQL and
    /// SQLite return the new token; MySQL/MariaDB report it as the last
    /// insert id. Binds name.
    pub take: Statement,
    /// Creates the row of a name never used, token 1 (MySQL/MariaDB: one
    /// row inserted; the others: returns the token). Binds name.
    pub create: Statement,
}

/// How a dialect takes a lock atomically.
#[derive(Debug, Clone)]
pub(crate) enum Acquire {
    /// SQLite and PostgreSQL: one `INSERT ... ON CONFLICT DO UPDATE ... WHERE
    /// ... RETURNING token`. One row on success, none when busy.
    Upsert(Statement),
    /// MySQL/MariaDB (no conditional upsert, no RETURNING): a single-row
    /// `UPDATE` that takes an existing row if free, expired or re-entered,
    /// reporting the token through `LAST_INSERT_ID(expr)`; when no row
    /// matched, `INSERT IGNORE` creates the row for a name never used (one
    /// row inserted = taken with token 1).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    UpdateThenInsert {
        update: Statement,
        insert: Statement,
    },
}

/// The statements one store uses.
#[derive(Debug, Clone)]
pub(crate) struct Queries {
    /// Creates the tables if missing.
    pub create: Vec<SqlStr>,
    /// Takes the lock if free, expired, or held by the same owner and
    /// reentrant.
    pub acquire: Acquire,
    /// Reads who holds a lock: `(owner, remaining_ms, waiting_mark_ms)`,
    /// each NULL when not live.
    pub probe: Statement,
    /// Marks a lock as waited for (PostgreSQL with NOTIFY: releases notify
    /// only while the mark is fresh).
    pub mark_waiting: Statement,
    /// Fair mode's waiting line, when `?fair=true`.
    pub tickets: Option<Tickets>,
    /// Drops one hold, owner- and token-checked. One row affected on
    /// success. PostgreSQL's also sends `NOTIFY` when the lock became free
    /// and someone waits, in the same statement.
    pub release: Statement,
    /// Extends a live lease, owner- and token-checked. One row affected on
    /// success; never revives a lock.
    pub renew: Statement,
    /// Extends many live leases at once (see [`RenewBatch`]).
    pub renew_batch: RenewBatch,
    /// Frees a lock whatever its owner.
    pub break_lock: Statement,
    /// The live holder's owner and token.
    pub holder: Statement,
    /// A guarded transaction's check (see `guarded.rs`): the token of the
    /// lock's row if `owner` holds it with `token` and its lease is live,
    /// the row locked against change until the transaction ends (SQLite:
    /// the database's write lock).
    pub keep: Statement,
    /// The token in the lock's row, held or not.
    pub token_of: Statement,
    /// A lock taken inside the caller's transaction (see `in_tx.rs`).
    pub in_tx: InTx,
    /// Semaphores and read-write locks.
    pub counted: Counted,
    /// An operator's reads: `inspect` and `list` (see `table/inspect.rs`).
    pub inspect: Inspect,
    /// Records (see `table/records.rs`).
    pub records: Records,
    /// Opens a transaction that takes locks (see [`counted::begin`]).
    pub begin: &'static str,
}

impl Queries {
    pub(crate) fn new(dialect: Dialect, table: &str, notify: bool, fair: bool) -> Self {
        match dialect {
            Dialect::MySql => mysql::queries(table, fair),
            Dialect::Postgres | Dialect::Sqlite => upsert::queries(dialect, table, notify, fair),
        }
    }
}

/// `name` as a quoted identifier. PostgreSQL folds unquoted identifiers to
/// lower case, so the quoted form is lowered too: `table=MyLocks` names the
/// same table `mylocks` as before identifiers were quoted. MySQL and SQLite
/// keep the case as given (their matching rules do not change with quotes).
pub(crate) fn ident(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::MySql => format!("`{name}`"),
        Dialect::Postgres => format!("\"{}\"", name.to_ascii_lowercase()),
        Dialect::Sqlite => format!("\"{name}\""),
    }
}

/// The names of fair mode's waiting line and its index, as given (unquoted).
pub(crate) fn queue_names(table: &str) -> (String, String) {
    (format!("{table}_queue"), format!("{table}_queue_name"))
}

/// The SQL type of the `name` and `owner` columns. MySQL/MariaDB: binary, so
/// that names compare byte for byte (every `utf8mb4` collation, `_bin`
/// included, ignores trailing spaces, so `"backup "` was the lock `"backup"`).
pub(crate) fn text_type(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "TEXT",
        Dialect::Postgres => "VARCHAR(256)",
        Dialect::MySql => "VARBINARY(256)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statements(q: &Queries) -> Vec<&Statement> {
        let mut all = vec![
            &q.probe,
            &q.mark_waiting,
            &q.release,
            &q.renew,
            &q.break_lock,
            &q.holder,
        ];
        match &q.acquire {
            Acquire::Upsert(s) => all.push(s),
            Acquire::UpdateThenInsert { update, insert } => all.extend([update, insert]),
        }
        if let Some(t) = &q.tickets {
            all.extend([&t.enqueue, &t.heartbeat, &t.dequeue, &t.sweep]);
        }
        all.extend(q.counted.statements());
        all.extend(q.inspect.statements());
        all.extend(q.records.statements());
        all
    }

    /// Every placeholder has a value and every value a placeholder: `$N`
    /// (PostgreSQL, SQLite) refer to the list by number, MySQL's `?` take it
    /// in order.
    #[test]
    fn parameter_lists_match_the_placeholders() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            for (notify, fair) in [(false, false), (true, false), (false, true), (true, true)] {
                let q = Queries::new(dialect, "t", notify, fair);
                for s in statements(&q) {
                    let sql = s.sql.as_str();
                    if dialect == Dialect::MySql {
                        assert!(!sql.contains('$'), "{sql}");
                        assert_eq!(sql.matches('?').count(), s.params.len(), "{sql}");
                    } else {
                        assert!(!sql.contains('?'), "{sql}");
                        let used: Vec<usize> =
                            (1..=9).filter(|n| sql.contains(&format!("${n}"))).collect();
                        let expected: Vec<usize> = (1..=s.params.len()).collect();
                        assert_eq!(used, expected, "{sql}");
                        let mut names = s.params.clone();
                        names.dedup();
                        assert_eq!(names.len(), s.params.len(), "{sql}");
                    }
                }
            }
        }
    }
}
