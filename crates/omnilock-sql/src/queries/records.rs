//! The statements of records (see `table/records.rs`), per dialect: one row
//! per record name in `<table>_records`, whose `expires_at` is milliseconds
//! since the Unix epoch by the database's clock, as in the lock tables. A
//! row whose time has passed is no record: every statement filters it out,
//! and the next write of its name replaces it.
//!
//! Each is written once with `?` placeholders (see [`super::counted`] for
//! how they are numbered).

use omnilock_core::MAX_RECORD_BYTES;

use super::counted::{clock, number};
use super::{Param, Statement, ident, text_type};
use crate::config::Dialect;
use Param::*;

/// The record table's name, as given (unquoted).
pub(crate) fn records_name(table: &str) -> String {
    format!("{table}_records")
}

/// One dialect's statements for records.
#[derive(Debug, Clone)]
pub(crate) struct Records {
    /// Writes the record, replacing any earlier one of its name, kept
    /// until the database's clock passes `now + keep`. Binds name, value,
    /// keep.
    pub write: Statement,
    /// `(value, milliseconds left)` of the live record. Binds name.
    pub read: Statement,
    /// Deletes the live record; one row when there was one. Binds name.
    pub delete: Statement,
}

impl Records {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        let records = ident(dialect, &records_name(table));
        let (now, _, _) = clock(dialect);
        let stmt = |sql: String, params: &[Param]| Statement::new(number(dialect, &sql), params);
        let insert =
            format!("INSERT INTO {records} (name, value, expires_at) VALUES (?, ?, {now} + ?)");
        let (write, value) = match dialect {
            // No conditional upsert: the new values are bound once more.
            Dialect::MySql => (
                stmt(
                    format!("{insert} ON DUPLICATE KEY UPDATE value = ?, expires_at = {now} + ?"),
                    &[Name, Value, KeepMs, Value, KeepMs],
                ),
                // Kept as bytes: read back as text.
                "CAST(value AS CHAR)",
            ),
            Dialect::Postgres | Dialect::Sqlite => (
                stmt(
                    format!(
                        "{insert} ON CONFLICT (name) DO UPDATE \
                         SET value = excluded.value, expires_at = excluded.expires_at"
                    ),
                    &[Name, Value, KeepMs],
                ),
                "value",
            ),
        };
        Records {
            write,
            read: stmt(
                format!(
                    "SELECT {value}, expires_at - {now} FROM {records} \
                     WHERE name = ? AND expires_at > {now}"
                ),
                &[Name],
            ),
            delete: stmt(
                format!("DELETE FROM {records} WHERE name = ? AND expires_at > {now}"),
                &[Name],
            ),
        }
    }

    #[cfg(test)]
    pub(crate) fn statements(&self) -> Vec<&Statement> {
        vec![&self.write, &self.read, &self.delete]
    }
}

/// The record table. `name` is the lock table's exact type; MySQL/MariaDB
/// keep the value as bytes too, so that the table's character set cannot
/// change it.
pub(crate) fn create(dialect: Dialect, table: &str) -> String {
    let records = ident(dialect, &records_name(table));
    let text = text_type(dialect);
    let (value, int) = match dialect {
        Dialect::Sqlite => ("TEXT".to_string(), "INTEGER"),
        Dialect::Postgres => ("TEXT".to_string(), "BIGINT"),
        Dialect::MySql => (format!("VARBINARY({MAX_RECORD_BYTES})"), "BIGINT"),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {records} (
            name {text} NOT NULL PRIMARY KEY,
            value {value} NOT NULL,
            expires_at {int} NOT NULL
        )"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record table's name fits wherever the longest allowed table
    /// name does.
    #[test]
    fn records_name_is_no_longer_than_the_longest_suffix() {
        assert!(records_name("").len() <= crate::config::LONGEST_SUFFIX.len());
    }
}
