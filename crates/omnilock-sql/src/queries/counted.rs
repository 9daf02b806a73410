//! The statements of semaphores and read-write locks (see
//! `crate::counted` for the recipe), per dialect.
//!
//! The text is written once with `?` placeholders, one per value in the
//! statement's list; PostgreSQL and SQLite get them numbered (`$1`, `$2`,
//! ...) in the same order, so every placeholder has its own number.

use super::{Param, Statement, ident, text_type};
use crate::config::Dialect;
use Param::*;

/// Opens a transaction that takes locks: SQLite's `IMMEDIATE` takes the
/// file's writer lock at once (no upgrade later, which could fail as busy);
/// MySQL and PostgreSQL read committed data with each statement, so a
/// transaction that waited for a row lock sees what its holder committed.
pub(crate) fn begin(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "BEGIN IMMEDIATE",
        Dialect::Postgres => "BEGIN ISOLATION LEVEL READ COMMITTED",
        Dialect::MySql => "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
    }
}

/// The entries table, its index, and the heads table (MySQL and
/// PostgreSQL), as given (unquoted).
pub(super) fn counted_names(table: &str) -> [String; 3] {
    [
        format!("{table}_entries"),
        // No longer than fair mode's `_queue_name`, which sets the longest
        // table name each dialect accepts (`config::LONGEST_SUFFIX`).
        format!("{table}_entries_ix"),
        format!("{table}_heads"),
    ]
}

/// One dialect's statements for semaphores and read-write locks.
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    /// MySQL and PostgreSQL: locks the name's head row (creating it), so
    /// that attempts on one name run one at a time and ids are taken in
    /// the order they commit. SQLite's `BEGIN IMMEDIATE` already does.
    pub head: Option<Statement>,
    /// Deletes the name's expired entries.
    pub purge: Statement,
    /// Extends a waiting entry's mark; one row when it was still there.
    pub refresh: Statement,
    /// A capacity other than the caller's, recorded by a live entry.
    pub other_capacity: Statement,
    /// `(waiting entries, total weight)` of the name.
    pub usage: Statement,
    /// Adds the caller's entry, waiting; returns its id unless
    /// `inserted_id` is needed to read it.
    pub insert: Statement,
    /// MySQL (no `RETURNING`): reads the id `insert` took.
    pub inserted_id: Option<Statement>,
    /// `(id, weight)` of the name's entries up to the caller's, in order.
    pub ahead: Statement,
    /// Marks an entry holding, with the lease asked for.
    pub grant: Statement,
    /// Milliseconds until the first holder's lease ends, NULL without one.
    pub next_expiry: Statement,
    /// Deletes an entry whatever its state (a dropped acquire).
    pub forget: Statement,
    /// Deletes a live, holding entry of this owner.
    pub release: Statement,
    /// Deletes the name's live, holding entries, whoever their owner
    /// (`break_holds`): every one, or (`[1]`) one owner's. Binds family,
    /// name (and owner).
    pub break_holds: [Statement; 2],
    /// PostgreSQL with NOTIFY: `forget`, `release` and `break_holds` are a
    /// `SELECT` over the `DELETE` whose first column is the rows deleted,
    /// and which notifies [`notify_channel`] with the lock name in the same
    /// round trip.
    pub deletes_select_count: bool,
    /// Extends a live, holding entry of this owner; never revives one.
    pub renew: Statement,
}

/// The PostgreSQL channel on which semaphore and read-write lock releases
/// notify, with the lock name as payload (the mutex's is the table's name).
pub(crate) fn notify_channel(table: &str) -> String {
    format!("{table}_entries")
}

impl Counted {
    pub(crate) fn new(dialect: Dialect, table: &str, notify: bool) -> Self {
        let [entries, _, heads] = counted_names(table);
        let (e, heads) = (ident(dialect, &entries), ident(dialect, &heads));
        let (now, int, greatest) = clock(dialect);
        let stmt = |sql: String, params: &[Param]| Statement::new(number(dialect, &sql), params);
        let head = match dialect {
            Dialect::Sqlite => None,
            Dialect::Postgres => Some(stmt(
                format!(
                    "INSERT INTO {heads} (family, name, used_at) VALUES (?, ?, {now}) \
                     ON CONFLICT (family, name) DO UPDATE SET used_at = excluded.used_at"
                ),
                &[Family, Name],
            )),
            Dialect::MySql => Some(stmt(
                format!(
                    "INSERT INTO {heads} (family, name, used_at) VALUES (?, ?, {now}) \
                     ON DUPLICATE KEY UPDATE used_at = {now}"
                ),
                &[Family, Name],
            )),
        };
        let notifies = dialect == Dialect::Postgres && notify;
        // With NOTIFY, a delete also wakes the waiters of the name in every
        // listening process (the channel is a checked plain identifier).
        let delete = |condition: &str, params: &[Param]| {
            let delete = format!("DELETE FROM {e} WHERE {condition}");
            let sql = if notifies {
                let channel = notify_channel(table);
                format!(
                    "WITH gone AS ({delete} RETURNING name) \
                     SELECT COUNT(*), COUNT(pg_notify('{channel}', name)) FROM gone"
                )
            } else {
                delete
            };
            stmt(sql, params)
        };
        let returning = if dialect == Dialect::MySql {
            ""
        } else {
            " RETURNING id"
        };
        Counted {
            head,
            purge: stmt(
                format!("DELETE FROM {e} WHERE family = ? AND name = ? AND expires_at <= {now}"),
                &[Family, Name],
            ),
            refresh: stmt(
                format!("UPDATE {e} SET expires_at = {now} + ? WHERE id = ? AND holding = 0"),
                &[LeaseMs, Id],
            ),
            other_capacity: stmt(
                format!(
                    "SELECT capacity FROM {e} WHERE family = ? AND name = ? AND capacity <> ? \
                     LIMIT 1"
                ),
                &[Family, Name, Capacity],
            ),
            usage: stmt(
                format!(
                    "SELECT CAST(COUNT(*) - COALESCE(SUM(holding), 0) AS {int}), \
                     CAST(COALESCE(SUM(weight), 0) AS {int}) \
                     FROM {e} WHERE family = ? AND name = ?"
                ),
                &[Family, Name],
            ),
            insert: stmt(
                format!(
                    "INSERT INTO {e} (family, name, owner, weight, capacity, holding, expires_at) \
                     VALUES (?, ?, ?, ?, ?, 0, {now} + ?){returning}"
                ),
                &[Family, Name, Owner, Weight, Capacity, LeaseMs],
            ),
            inserted_id: (dialect == Dialect::MySql)
                .then(|| stmt("SELECT CAST(LAST_INSERT_ID() AS SIGNED)".to_string(), &[])),
            ahead: stmt(
                format!(
                    "SELECT id, weight FROM {e} WHERE family = ? AND name = ? AND id <= ? \
                     ORDER BY id"
                ),
                &[Family, Name, Id],
            ),
            grant: stmt(
                format!("UPDATE {e} SET holding = 1, expires_at = {now} + ? WHERE id = ?"),
                &[TtlMs, Id],
            ),
            next_expiry: stmt(
                format!(
                    "SELECT CAST(MIN(expires_at) - {now} AS {int}) FROM {e} \
                     WHERE family = ? AND name = ? AND holding = 1"
                ),
                &[Family, Name],
            ),
            forget: delete("id = ?", &[Id]),
            release: delete(
                &format!("id = ? AND owner = ? AND holding = 1 AND expires_at > {now}"),
                &[Id, Owner],
            ),
            break_holds: [
                delete(
                    &format!("family = ? AND name = ? AND holding = 1 AND expires_at > {now}"),
                    &[Family, Name],
                ),
                delete(
                    &format!(
                        "family = ? AND name = ? AND holding = 1 AND expires_at > {now} \
                         AND owner = ?"
                    ),
                    &[Family, Name, Owner],
                ),
            ],
            deletes_select_count: notifies,
            renew: stmt(
                format!(
                    "UPDATE {e} SET expires_at = {greatest}(expires_at, {now} + ?) \
                     WHERE id = ? AND owner = ? AND holding = 1 AND expires_at > {now}"
                ),
                &[TtlMs, Id, Owner],
            ),
        }
    }

    #[cfg(test)]
    pub(crate) fn statements(&self) -> Vec<&Statement> {
        let mut all = vec![
            &self.purge,
            &self.refresh,
            &self.other_capacity,
            &self.usage,
            &self.insert,
            &self.ahead,
            &self.grant,
            &self.next_expiry,
            &self.forget,
            &self.release,
            &self.renew,
        ];
        all.extend(&self.break_holds);
        all.extend(self.head.iter().chain(&self.inserted_id));
        all
    }
}

/// The tables (and SQLite's and PostgreSQL's index) that hold semaphores
/// and read-write locks.
pub(crate) fn create(dialect: Dialect, table: &str) -> Vec<String> {
    let [entries, index, heads] = counted_names(table);
    let (entries, index, heads) = (
        ident(dialect, &entries),
        ident(dialect, &index),
        ident(dialect, &heads),
    );
    let text = text_type(dialect);
    let int = match dialect {
        Dialect::Sqlite => "INTEGER",
        _ => "BIGINT",
    };
    let id = match dialect {
        Dialect::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
        Dialect::MySql => "BIGINT AUTO_INCREMENT PRIMARY KEY",
    };
    let columns = format!(
        "id {id},
         family {text} NOT NULL, name {text} NOT NULL, owner {text} NOT NULL,
         weight {int} NOT NULL, capacity {int} NOT NULL,
         holding {int} NOT NULL DEFAULT 0, expires_at {int} NOT NULL"
    );
    let heads = format!(
        "CREATE TABLE IF NOT EXISTS {heads} (
            family {text} NOT NULL, name {text} NOT NULL, used_at {int} NOT NULL,
            PRIMARY KEY (family, name))"
    );
    match dialect {
        Dialect::MySql => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {entries} ({columns},
                    KEY {index} (family, name, id))"
            ),
            heads,
        ],
        _ => {
            let mut all = vec![
                format!("CREATE TABLE IF NOT EXISTS {entries} ({columns})"),
                format!("CREATE INDEX IF NOT EXISTS {index} ON {entries} (family, name, id)"),
            ];
            if dialect == Dialect::Postgres {
                all.push(heads);
            }
            all
        }
    }
}

/// The dialect's database clock in milliseconds, its 64-bit integer type
/// (as `CAST` spells it) and its two-argument maximum.
pub(super) fn clock(dialect: Dialect) -> (&'static str, &'static str, &'static str) {
    match dialect {
        Dialect::Sqlite => (
            "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            "INTEGER",
            "MAX",
        ),
        Dialect::Postgres => (
            "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            "BIGINT",
            "GREATEST",
        ),
        Dialect::MySql => (super::mysql::NOW, "SIGNED", "GREATEST"),
    }
}

/// `sql` with its `?` placeholders numbered for PostgreSQL and SQLite.
pub(super) fn number(dialect: Dialect, sql: &str) -> String {
    if dialect == Dialect::MySql {
        return sql.to_string();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name derived from the table fits wherever the longest allowed
    /// table name does.
    #[test]
    fn derived_names_are_no_longer_than_the_longest_suffix() {
        for name in counted_names("") {
            assert!(
                name.len() <= crate::config::LONGEST_SUFFIX.len(),
                "{name:?} is longer than {:?}",
                crate::config::LONGEST_SUFFIX
            );
        }
    }
}
